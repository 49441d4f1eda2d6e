"""Which pod holds each GPU, from the kubelet's pod-resources socket (collectors/pod_resources.py).

A real gRPC server on a unix socket stands in for the kubelet: it serves
v1.PodResourcesLister/List and answers recorded bytes (tests/data/pod_resources/,
encoded from the kubelet's own proto), or bad answers, or none. The nvml source
reads the GPUs through the real nvidia-ml-py binding on the NVML stand-in.
"""

import contextlib
import logging
import re
import shutil
import socket as sockets
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import yaml

from collectors.cli import build_parser
from collectors.pod_resources import (
    DEADLINE,
    MAX_RESPONSE,
    ListPodResourcesResponse,
    PodResources,
    gpu_owners,
)
from gpulse import schema, usage
from tests import fake_nvml
from tests.test_collector_nvml import (  # noqa: F401 (fixtures: the stand-in loaded, sources opened on it)
    collector_cli,
    fake_library,
    only_sample,
    open_source,
    run_python,
)

RECORDED = (Path(__file__).resolve().parent / "data" / "pod_resources" / "list.binpb").read_bytes()
LOGGER = "collectors.pod_resources"
TRAINER = {"namespace": "training", "pod": "llama-sft-0412-worker-0", "container": "trainer"}
SERVER = {"namespace": "inference", "pod": "vllm-llama-3-8b-7d9c8b6f5-x2k4p", "container": "server"}


def gpu_uuid(index: int) -> str:
    return f"GPU-fa4e0000-0000-4000-8000-{index:012d}"  # the stand-in's GPU i


@contextlib.contextmanager
def kubelet(answer):
    """Serve List on a unix socket with ``answer(request bytes, context) -> response bytes``; yield the socket."""
    # Not pytest's tmp_path: a unix socket's path must fit in 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="kubelet-", dir="/tmp"))
    socket = folder / "kubelet.sock"
    # No (de)serializers: the server sees and sends the bytes on the wire.
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(answer)})
    server = grpc.server(ThreadPoolExecutor(max_workers=4), handlers=(handler,))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield socket
    finally:
        server.stop(grace=None)
        shutil.rmtree(folder)


def answering(response: bytes):
    requests = []

    def answer(request, context):
        requests.append(request)
        return response

    answer.requests = requests
    return answer


def response(*pods) -> bytes:
    """A List answer of (namespace, pod, container, [device ids of nvidia.com/gpu]) as the kubelet encodes it."""
    message = ListPodResourcesResponse()
    for namespace, name, container, device_ids in pods:
        pod = message.pod_resources.add(name=name, namespace=namespace)
        pod.containers.add(name=container).devices.add(resource_name="nvidia.com/gpu", device_ids=device_ids)
    return message.SerializeToString()


def messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def test_each_gpu_a_pod_holds_carries_the_pod_and_one_without_a_process_counts_as_allocated(
        open_source):  # noqa: F811
    answer = answering(RECORDED)
    with kubelet(answer) as socket:
        sample = only_sample(open_source(gpus=4, pod_resources=socket))

    assert answer.requests == [b""]  # an empty ListPodResourcesRequest
    gpus = sample["gpus"]
    assert [gpu.get("k8s") for gpu in gpus] == [TRAINER, TRAINER, SERVER, None]
    assert "k8s" not in gpus[3]  # nobody's: absent, as the dcgm source leaves it
    # GPU 2 runs nothing, yet a pod holds it: allocated, and the pod's
    assert gpus[2]["processes"] == []
    assert usage.is_allocated(gpus[2]) and not usage.is_allocated(gpus[3])
    assert usage.owner(gpus[2]) == usage.Owner("", "", "inference/vllm-llama-3-8b-7d9c8b6f5-x2k4p")
    assert schema.parse(schema.encode(sample)) == sample


def test_whole_gpus_and_mig_instances_by_uuid_are_mapped_from_the_recorded_answer():
    owners, rejected = gpu_owners(ListPodResourcesResponse.FromString(RECORDED))

    # The SR-IOV network device and the pods without devices map nothing.
    notebook = {"namespace": "notebooks", "pod": "jupyter-mchen-0", "container": "notebook"}
    assert owners == {gpu_uuid(0): TRAINER, gpu_uuid(1): TRAINER, gpu_uuid(2): SERVER,
                      "MIG-5d1e2f3a-0b4c-5d6e-8f90-a1b2c3d4e5f6": notebook}
    assert rejected == []


def test_a_time_sliced_gpu_names_the_first_of_its_pods_and_its_replica_ids_map_to_it():
    answer = ListPodResourcesResponse.FromString(response(
        ("team-b", "notebook-1", "jupyter", [f"{gpu_uuid(0)}::3"]),
        ("team-a", "notebook-0", "jupyter", [f"{gpu_uuid(0)}::0", f"{gpu_uuid(1)}::1"]),
        ("team-a", "index", "worker", ["0", "GPU-FA4E0000-0000-4000-8000-000000000002", f"{gpu_uuid(3)}::x"]),
    ))
    owners, _ = gpu_owners(answer)

    notebook = {"namespace": "team-a", "pod": "notebook-0", "container": "jupyter"}
    assert owners == {gpu_uuid(0): notebook, gpu_uuid(1): notebook}


def test_without_the_socket_gpus_are_not_attributed_and_it_is_said_once(
        open_source, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, LOGGER)
    missing = Path(tempfile.gettempdir()) / "no-kubelet-here" / "kubelet.sock"
    source = open_source(gpus=2, pod_resources=missing)

    assert [gpu.get("k8s") for gpu in only_sample(source)["gpus"]] == [None, None]
    source._pods.refresh()  # the next question, as the background thread asks it
    assert messages(caplog) == [f"no kubelet pod-resources socket at {missing} (not a Kubernetes node?); "
                                "GPUs are not attributed to pods until it answers"]


def test_a_socket_nobody_listens_on_is_said_once_and_attributes_nothing(caplog):
    # A kubelet that died leaves its socket file behind, bound by nobody.
    socket = Path(tempfile.mkdtemp(prefix="kubelet-", dir="/tmp")) / "kubelet.sock"
    with sockets.socket(sockets.AF_UNIX) as stale:
        stale.bind(str(socket))
    try:
        pods = PodResources(socket)
        pods.refresh()
        pods.refresh()
    finally:
        shutil.rmtree(socket.parent)

    assert pods.owners == {}
    [message] = messages(caplog)
    assert message.startswith(f"kubelet pod-resources at {socket}: UNAVAILABLE ")
    assert message.endswith("; GPUs are not attributed to pods until it answers")


def test_a_kubelet_that_hangs_costs_the_deadline_at_open_and_never_a_sample(
        open_source, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, LOGGER)
    released = threading.Event()

    def hang(request, context):
        released.wait(30)
        return RECORDED

    with kubelet(hang) as socket:
        try:
            opened = time.monotonic()
            source = open_source(gpus=2, pod_resources=socket)
            opening = time.monotonic() - opened
            start = time.monotonic()
            sample = only_sample(source)
            sampling = time.monotonic() - start
        finally:
            released.set()

    assert DEADLINE <= opening < DEADLINE + 2.0
    assert sampling < 0.5
    assert [gpu.get("k8s") for gpu in sample["gpus"]] == [None, None]
    assert messages(caplog) == [f"kubelet pod-resources at {socket}: DEADLINE_EXCEEDED Deadline Exceeded; "
                                "GPUs are not attributed to pods until it answers"]


def test_a_sample_never_waits_on_a_question_in_flight(caplog):
    asked = threading.Event()
    released = threading.Event()

    def first_answers_then_hangs(request, context):
        if asked.is_set():
            released.wait(30)
        asked.set()
        return RECORDED

    with kubelet(first_answers_then_hangs) as socket:
        pods = PodResources(socket, every=0.05, deadline=5.0)
        try:
            pods.start()
            time.sleep(0.3)  # the thread's next question is hanging now
            start = time.monotonic()
            owner = pods.owner(gpu_uuid(2))
            assert time.monotonic() - start < 1  # not the 30 s the question hangs
        finally:
            pods.stop()
            released.set()
    assert owner == SERVER  # the last answer stands while the next is awaited


def test_an_answer_that_is_not_the_message_is_logged_and_attributes_nothing(
        open_source, caplog):  # noqa: F811
    # pod_resources { name: <bytes that are not UTF-8> }: protobuf refuses the string field
    with kubelet(answering(b"\x0a\x05\x0a\x03\xff\xfe\xfd")) as socket:
        source = open_source(gpus=2, pod_resources=socket)
        sample = only_sample(source)

    assert [gpu.get("k8s") for gpu in sample["gpus"]] == [None, None]
    # Once per refresh that failed: on a loaded machine the thread may refresh twice before the sample.
    logged = messages(caplog)
    assert logged and all(message.startswith(f"kubelet pod-resources at {socket}: INTERNAL ") for message in logged)


def test_an_answer_over_the_size_limit_is_refused(caplog):
    huge = response(*[("default", f"pod-{i}", "main", [gpu_uuid(0)]) for i in range(MAX_RESPONSE // 60)])
    assert len(huge) > MAX_RESPONSE
    with kubelet(answering(huge)) as socket:
        pods = PodResources(socket)
        pods.refresh()

    assert pods.owners == {}
    [message] = messages(caplog)
    assert message.startswith(f"kubelet pod-resources at {socket}: RESOURCE_EXHAUSTED ")


def test_names_kubernetes_does_not_allow_leave_their_gpus_unattributed_and_keep_the_rest(
        open_source, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, LOGGER)
    too_long = ".".join(["a" * 63] * 4)  # DNS labels, 255 characters: too long a name
    assert len(too_long) > schema.MAX_K8S_NAME
    answer = response(
        ("training", "llama-sft-0412-worker-0", "trainer", [gpu_uuid(0)]),
        ("default", too_long, "main", [gpu_uuid(1)]),
        ("../etc", "web-0", "main", [gpu_uuid(2)]),
        ("default", "web-1", "<img src=x onerror=alert(1)>", [gpu_uuid(3)]),
        ("", "", "", [gpu_uuid(3)]),
    )
    with kubelet(answering(answer)) as socket:
        source = open_source(gpus=4, pod_resources=socket)
        sample = only_sample(source)
        source._pods.refresh()

    assert [gpu.get("k8s") for gpu in sample["gpus"]] == [TRAINER, None, None, None]
    assert schema.parse(schema.encode(sample)) == sample
    answered, refused = messages(caplog)  # each once, over two questions
    assert answered == f"kubelet pod-resources at {socket} answers: 1 GPUs held by pods"
    assert refused == (
        "kubelet pod-resources: 4 containers with names Kubernetes does not allow, their GPUs left unattributed: "
        f"'default'/'{'a' * 63}.'… container 'main'; '../etc'/'web-0' container 'main'; "
        "'default'/'web-1' container '<img src=x onerror=alert(1)>'")


def test_a_kubelet_that_comes_back_is_read_again(caplog):
    caplog.set_level(logging.INFO, LOGGER)
    with kubelet(answering(RECORDED)) as socket:
        pods = PodResources(socket)
        pods.refresh()
        assert pods.owner(gpu_uuid(0)) == TRAINER
    pods.refresh()  # the kubelet restarts: its socket is gone
    assert pods.owner(gpu_uuid(0)) is None
    with kubelet(answering(RECORDED)) as socket_again:
        pods.socket = socket_again
        pods.refresh()
        assert pods.owner(gpu_uuid(0)) == TRAINER

    # 4: GPUs 0-2 and the notebook's MIG instance
    assert messages(caplog) == [
        f"kubelet pod-resources at {socket} answers: 4 GPUs held by pods",
        f"no kubelet pod-resources socket at {socket} (not a Kubernetes node?); "
        "GPUs are not attributed to pods until it answers",
        f"kubelet pod-resources at {socket_again} answers: 4 GPUs held by pods"]


def test_the_collector_cli_reads_the_socket_it_is_given_and_its_first_sample_carries_the_pods():
    env = fake_nvml.subprocess_env(fake_nvml.config(gpus=4))
    with kubelet(answering(RECORDED)) as socket:
        result = run_python(collector_cli("--kubelet-pod-resources", str(socket)), env)

    assert result.returncode == 0, result.stderr
    sample = schema.parse(result.stdout)
    assert [gpu.get("k8s") for gpu in sample["gpus"]] == [TRAINER, TRAINER, SERVER, None]


def test_the_documented_daemonset_gives_the_collector_the_kubelets_socket_folder():
    guide = (Path(__file__).resolve().parent.parent / "docs" / "deploy-kubernetes.md").read_text()
    manifests = [document for block in re.findall(r"```yaml\n(.*?)```", guide, re.S)
                 for document in yaml.safe_load_all(block) if document]
    [daemonset] = [m for m in manifests if m.get("kind") == "DaemonSet" and m["metadata"]["name"] == "gpulse-node"]
    pod = daemonset["spec"]["template"]["spec"]
    [collector] = [c for c in pod["containers"] if c["name"] == "collector"]
    args = build_parser().parse_args(collector["command"][3:])

    [mount] = [m for m in collector["volumeMounts"] if Path(m["mountPath"]) == args.kubelet_pod_resources.parent]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == mount["mountPath"] and mount["readOnly"] is True
    assert collector["securityContext"]["runAsUser"] == 0  # the kubelet's socket is root's
