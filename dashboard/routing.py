from django.urls import path

from dashboard.benchmarks.consumers import JobConsumer
from dashboard.nodes.consumers import ClusterConsumer, NodeConsumer

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/nodes/<str:name>/", NodeConsumer.as_asgi()),
    path("ws/benchmarks/<int:pk>/", JobConsumer.as_asgi()),
]
