"""The HTML views every alerts model shares: its list with a create form, its edit page, delete.

A subclass names the model's access, templates and URLs, and adds what its
pages show besides. Permission is checked before the object is looked up, so
a user without it gets 403 whether the id exists or not.
"""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render, resolve_url

from dashboard.alerts.access import ModelAccess


def require(request, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"you need the permission {perm}")


def confirm(request, question: str, removes: list[str], action: str, cancel_url: str):
    """The page that asks before a removal: what goes, a button that POSTs back here, a way out."""
    context = {"question": question, "removes": removes, "action": action, "cancel_url": resolve_url(cancel_url)}
    return render(request, "alerts/confirm.html", context)


def count(number: int, noun: str) -> str:
    """Return "1 silence", "2 silences"."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


class ModelPages:
    access: ModelAccess
    noun = ""  # in messages: "Rule “x” saved."
    list_url = ""  # URL name of the list page
    list_template = edit_template = ""
    list_name = object_name = ""  # template context names of the objects and of one object

    def list_context(self) -> dict:
        return {}

    def edit_context(self, obj) -> dict:
        return {}

    def removes(self, obj) -> list[str]:
        """What goes with the object when it is deleted, for the question asked first."""
        return []

    def saved_url(self, obj) -> str:
        return self.list_url

    def created_message(self, form, obj) -> str:
        return f"{self.noun} “{obj}” created."

    def audit_created(self, request, obj) -> None:
        self.access.audit(request, "create", obj)

    def create(self, request):
        """Check, validate and save a new object from the POST; return (the object or None, the form)."""
        require(request, self.access.perm("add"))
        form = self.access.form(request.user, request.POST)
        if not form.is_valid():
            return None, form
        obj = form.save()
        self.audit_created(request, obj)
        messages.success(request, self.created_message(form, obj))
        return obj, form

    def _require_view(self, request) -> None:
        if self.access.view_perm:
            require(request, self.access.view_perm)

    def list(self, request):
        self._require_view(request)
        form = None
        if request.method == "POST":
            obj, form = self.create(request)
            if obj is not None:
                return redirect(self.saved_url(obj))
        elif request.user.has_perm(self.access.perm("add")):
            form = self.access.form(request.user)
        context = {self.list_name: self.access.model.objects.all(), "form": form, **self.list_context()}
        return render(request, self.list_template, context)

    def edit(self, request, pk):
        self._require_view(request)
        if request.method == "POST":
            require(request, self.access.perm("change"))
        obj = get_object_or_404(self.access.model, pk=pk)
        # Before a POST's form writes its values, valid or not, into obj.
        context = {self.object_name: obj, **self.edit_context(obj)}
        form = self.access.form(request.user, instance=obj)
        if request.method == "POST":
            form = self.access.form(request.user, request.POST, instance=obj)
            if form.is_valid():
                form.save()
                self.access.audit(request, "update", obj)
                messages.success(request, f"{self.noun} “{obj}” saved.")
                return redirect(self.saved_url(obj))
        return render(request, self.edit_template, {**context, "form": form})

    def delete(self, request, pk):
        """Ask first (GET), saying what goes with the object; delete on the answer (POST)."""
        require(request, self.access.perm("delete"))
        obj = get_object_or_404(self.access.model, pk=pk)
        if request.method != "POST":
            noun = self.noun.lower()
            return confirm(request, f"Delete {noun} “{obj}”?", [f"the {noun}", *self.removes(obj)],
                           f"Delete {noun}", self.list_url)
        self.access.audit(request, "delete", obj)
        obj.delete()
        messages.success(request, f"{self.noun} “{obj}” deleted.")
        return redirect(self.list_url)
