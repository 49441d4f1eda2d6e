"""The HTML views every alerts model shares: its list with a create form, its edit page, delete.

A subclass names the model's access, templates and URLs, and adds what its
pages show besides. Permission is checked before the object is looked up, so
a user without it gets 403 whether the id exists or not.
"""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render

from dashboard.alerts.access import ModelAccess


def require(request, perm: str) -> None:
    if not request.user.has_perm(perm):
        raise PermissionDenied(f"you need the permission {perm}")


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
        form = self.access.form(request.user, instance=obj)
        if request.method == "POST":
            form = self.access.form(request.user, request.POST, instance=obj)
            if form.is_valid():
                form.save()
                self.access.audit(request, "update", obj)
                messages.success(request, f"{self.noun} “{obj}” saved.")
                return redirect(self.saved_url(obj))
        return render(request, self.edit_template, {self.object_name: obj, "form": form, **self.edit_context(obj)})

    def delete(self, request, pk):
        require(request, self.access.perm("delete"))
        obj = get_object_or_404(self.access.model, pk=pk)
        self.access.audit(request, "delete", obj)
        obj.delete()
        messages.success(request, f"{self.noun} “{obj}” deleted.")
        return redirect(self.list_url)
