"""Forms shared by the HTML pages and the JSON API, so both validate the same way."""

import math
import re
from datetime import timedelta

from django import forms
from django.utils import timezone

from dashboard.alerts import outbound
from dashboard.alerts.models import (
    DEFAULT_RESUME_AFTER,
    Rule,
    Silence,
    WebhookEndpoint,
    is_gpu_metric,
    validate_webhook_url,
)

MAX_FOR_SECONDS = 7 * 24 * 3600
NODE_GLOB = re.compile(r"^[A-Za-z0-9_.:\-*?\[\]!]*$")


def _clean_glob(value: str) -> str:
    value = value.strip()
    if not NODE_GLOB.match(value):
        raise forms.ValidationError("use a node name or a glob of letters, digits, . _ - : and * ? [ ]")
    return value


class RuleForm(forms.ModelForm):
    class Meta:
        model = Rule
        fields = [
            "name",
            "metric",
            "throttle_reason",
            "comparison",
            "threshold",
            "for_seconds",
            "node_glob",
            "gpu_index",
            "severity",
            "enabled",
            "repeat_interval",
            "keep_firing_for",
            "drain",
            "resume_after",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Only rules that drain use it: left empty, it keeps the default.
        self.fields["resume_after"].required = False
        # Left empty: the alert resolves as soon as its condition is false.
        self.fields["keep_firing_for"].required = False

    def clean_resume_after(self):
        value = self.cleaned_data["resume_after"]
        return DEFAULT_RESUME_AFTER if value is None else value

    def clean_keep_firing_for(self):
        value = self.cleaned_data["keep_firing_for"]
        return 0 if value is None else value

    def clean_threshold(self):
        value = self.cleaned_data["threshold"]
        if value is not None and not math.isfinite(value):
            raise forms.ValidationError("must be a finite number")
        return value

    def clean_for_seconds(self):
        value = self.cleaned_data["for_seconds"]
        if value is not None and value > MAX_FOR_SECONDS:
            raise forms.ValidationError(f"at most {MAX_FOR_SECONDS} seconds (7 days)")
        return value

    def clean_repeat_interval(self):
        value = self.cleaned_data["repeat_interval"]
        if value is not None and value < 60:
            raise forms.ValidationError("at least 60 seconds, so a receiver is not flooded")
        return value

    def clean_node_glob(self):
        return _clean_glob(self.cleaned_data["node_glob"])

    def clean(self):
        data = super().clean()
        metric = data.get("metric")
        if metric == "gpu.throttle" and not data.get("throttle_reason"):
            self.add_error("throttle_reason", "gpu.throttle needs the throttle reason to watch")
        if metric and metric != "gpu.throttle" and data.get("throttle_reason"):
            self.add_error("throttle_reason", "only gpu.throttle takes a throttle reason")
        if metric and not is_gpu_metric(metric) and data.get("gpu_index") is not None:
            self.add_error("gpu_index", f"{metric} is a node-level metric; leave the GPU index empty")
        return data


class WebhookForm(forms.ModelForm):
    secret = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to generate one (new endpoint) or keep the current one (edit).",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["name", "url", "secret", "format", "enabled", "min_severity"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["url"].widget.attrs["placeholder"] = "https://receiver.example.com/hook"
        self.generated_secret = None

    def clean_url(self):
        """Refuse a target that delivery would refuse, now rather than at the first alert."""
        url = self.cleaned_data["url"]
        validate_webhook_url(url)
        try:
            policy = outbound.AddressPolicy.from_settings()
        except outbound.TransportError as exc:
            raise forms.ValidationError(exc.message) from None
        try:
            outbound.check_target(url, policy)
        except outbound.TransportError as exc:
            # A host that does not resolve is accepted: air-gapped sites often have
            # no DNS on the web server, or not the workers' DNS, and a name's answer
            # can change before the first alert anyway. Delivery resolves and checks
            # every address again, so this check is early advice, not the guard.
            if exc.permanent:
                raise forms.ValidationError(exc.message) from None
        return url

    def clean_secret(self):
        value = self.cleaned_data.get("secret") or ""
        if value:
            return value
        if self.instance.pk:
            return self.instance.secret
        # A generated secret is shown once to the person who created the endpoint.
        self.generated_secret = WebhookEndpoint._meta.get_field("secret").get_default()
        return self.generated_secret


class SilenceForm(forms.ModelForm):
    minutes = forms.IntegerField(min_value=1, max_value=30 * 24 * 60, initial=60, help_text="Mute for this long.")

    class Meta:
        model = Silence
        fields = ["rule", "node_glob", "gpu", "comment", "minutes"]

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_node_glob(self):
        return _clean_glob(self.cleaned_data["node_glob"])

    def clean(self):
        data = super().clean()
        if data.get("rule") is None and not data.get("node_glob") and data.get("gpu") is None:
            raise forms.ValidationError("name a rule, a node (or glob) or a GPU to silence")
        return data

    def save(self, commit=True):
        silence = super().save(commit=False)
        silence.until = timezone.now() + timedelta(minutes=self.cleaned_data["minutes"])
        if self.user is not None:
            silence.created_by = self.user.get_username()
        if commit:
            silence.save()
        return silence
