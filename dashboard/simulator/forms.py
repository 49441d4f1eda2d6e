"""The fault form, shared by the page and the JSON API so both validate the same way."""

from django import forms
from django.utils.html import escape

from gpulse.faults import FAULTS, NODE_FAULTS, SPELLINGS, parse_fault

# A node name is the whole target: "/" would name a GPU, and whitespace no node.
NODE_NAME = r"^[^/\s]+$"
# The faults a GPU (or every GPU of a node) takes, for the help text.
GPU_OR_NODE = ", ".join("xid (or xid:<code>)" if name == "xid" else name
                        for name in FAULTS if name not in NODE_FAULTS and name != "clear")


class FaultForm(forms.Form):
    node = forms.RegexField(regex=NODE_NAME, max_length=200, error_messages={"invalid": "a node name, without /"})
    gpu = forms.IntegerField(min_value=0, max_value=1023, required=False)
    fault = forms.CharField(
        max_length=20,
        # Django renders a help text as HTML: escaped, "<code>" is text, not an unclosed tag.
        help_text=escape(f"{GPU_OR_NODE}; {', '.join(sorted(NODE_FAULTS))} (whole node); or clear"),
    )

    def clean_fault(self) -> str:
        text = self.cleaned_data["fault"].strip().lower()
        try:
            parse_fault(text)
        except ValueError:
            raise forms.ValidationError(f"one of {SPELLINGS}") from None
        return text

    def clean(self):
        data = super().clean()
        fault = data.get("fault")
        if fault in NODE_FAULTS and data.get("gpu") is not None:
            self.add_error("gpu", f"'{fault}' is a fault of a whole node; leave the GPU empty")
        return data
