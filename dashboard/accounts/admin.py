from django.contrib import admin

from dashboard.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "created", "last_used")
    readonly_fields = ("token_hash", "created", "last_used")
