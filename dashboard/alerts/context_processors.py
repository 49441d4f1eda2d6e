from dashboard.alerts.evaluate import firing_count


def firing_alerts(request) -> dict:
    """Give every page the number of firing alerts for the header badge."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"firing_alerts": firing_count()}
