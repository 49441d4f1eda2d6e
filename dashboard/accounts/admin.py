from django.contrib import admin

from dashboard.accounts.models import ApiToken, AuditEvent


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "created", "last_used")
    readonly_fields = ("token_hash", "created", "last_used")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created", "username", "action", "target", "ip")
    list_filter = ("action",)
    search_fields = ("username", "target")

    # The audit log is append-only: nobody edits or deletes history through the UI.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
