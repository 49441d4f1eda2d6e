from django.urls import path

from dashboard.usage import views

app_name = "usage"
urlpatterns = [
    path("", views.usage_page, name="page"),
    path("<str:by>.csv", views.usage_csv, name="csv"),
]
