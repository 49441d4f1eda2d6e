from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from dashboard.accounts.throttle import locked_out


class ThrottledAuthenticationForm(AuthenticationForm):
    def clean(self):
        username = self.data.get("username", "")
        ip = self.request.META.get("REMOTE_ADDR") if self.request is not None else None
        if locked_out(username, ip):
            raise ValidationError(
                "Too many failed logins for this account or from this address; try again later.",
                code="throttled",
            )
        return super().clean()


class LoginView(auth_views.LoginView):
    form_class = ThrottledAuthenticationForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error("__all__", code="throttled"):
            response.status_code = 429
        return response
