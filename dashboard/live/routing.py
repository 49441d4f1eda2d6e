from django.urls import path

from dashboard.live.consumers import ClusterConsumer, NodeConsumer

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/nodes/<str:name>/", NodeConsumer.as_asgi()),
]
