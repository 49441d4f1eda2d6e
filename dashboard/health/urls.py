from django.urls import path

from dashboard.health import views

urlpatterns = [
    path("", views.health_list, name="health"),
]
