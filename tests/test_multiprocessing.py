"""vdev tensors shared between processes through torch.multiprocessing, as CUDA
tensors are (torch_vdev/multiprocessing.py, csrc/aten/SharedMemory.cpp): the receiver
gets a vdev tensor over the same device memory."""

import os
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing as mp

import torch_vdev

DEVICE = torch_vdev.BACKEND_NAME


def add_ten_and_report(tensor, results, done):
    results.put((str(tensor.device), tensor.cpu(), torch.vdev.memory_allocated(tensor.device)))
    tensor.add_(10)
    results.put("written")
    done.wait()


def report_later(tensors, results, sender_dropped_it):
    tensor = tensors.get(timeout=60)
    results.put("received")
    sender_dropped_it.wait()
    # A list, not a CPU tensor: this process exits next, and a shared CPU tensor needs
    # its sender alive until it is received.
    results.put(tensor.tolist())


def train_steps(model, seed, steps):
    # Hogwild: the steps update the parameters the parent process holds.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        inputs = torch.randn(8, 4, generator=generator).to(next(model.parameters()).device)
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()


def test_spawned_process_writes_the_senders_device_memory():
    context = mp.get_context("spawn")
    tensor = torch.arange(6.0, device=f"{DEVICE}:1")
    allocated = torch.vdev.memory_allocated(1)
    results, done = context.Queue(), context.Event()
    process = context.Process(target=add_ten_and_report, args=(tensor[2:], results, done))
    process.start()
    device, values, allocated_in_receiver = results.get(timeout=60)
    assert device == f"{DEVICE}:1"
    torch.testing.assert_close(values, torch.arange(2.0, 6.0))
    # As with CUDA's IPC: the sender's allocator still counts the memory it shared; the
    # receiver's mapping is no allocation of the receiver's allocator.
    assert torch.vdev.memory_allocated(1) == allocated > 0
    assert allocated_in_receiver == 0
    assert results.get(timeout=60) == "written"
    torch.testing.assert_close(tensor.cpu(), torch.tensor([0.0, 1.0, 12.0, 13.0, 14.0, 15.0]))
    done.set()
    process.join(timeout=60)
    assert process.exitcode == 0


def test_memory_outlives_the_sender_dropping_it():
    context = mp.get_context("spawn")
    tensors, results, sender_dropped_it = context.Queue(), context.Queue(), context.Event()
    process = context.Process(target=report_later, args=(tensors, results, sender_dropped_it))
    process.start()
    allocated = torch.vdev.memory_allocated()
    tensor = torch.full((1000,), 7.0, device=DEVICE)
    tensors.put(tensor)
    assert results.get(timeout=60) == "received"
    del tensor
    # The sender's allocator stops counting the memory once the sender dropped it.
    assert torch.vdev.memory_allocated() == allocated
    torch.vdev.empty_cache()
    torch.full((1000,), -1.0, device=DEVICE)  # would reuse freed device memory
    sender_dropped_it.set()
    assert results.get(timeout=60) == [7.0] * 1000
    process.join(timeout=60)


def test_queue_round_trip_shares_memory_and_keeps_geometry():
    context = mp.get_context("spawn")
    queue = context.Queue()
    base = torch.arange(12.0, device=DEVICE).reshape(3, 4)
    view = base.t()[1:]
    queue.put(view)
    received = queue.get(timeout=60)
    assert received.device == view.device and received.stride() == view.stride()
    torch.testing.assert_close(received.cpu(), view.cpu())
    received.mul_(-1)
    expected = torch.arange(12.0).reshape(3, 4)
    expected.t()[1:].mul_(-1)
    torch.testing.assert_close(base.cpu(), expected)


def test_hogwild_training_updates_the_parents_model():
    context = mp.get_context("spawn")
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model.load_state_dict(reference.state_dict())
    model = model.to(DEVICE)
    model.share_memory()
    # The child trains the shared parameters, then the parent goes on training them:
    # one process after the other, so the result is deterministic.
    process = context.Process(target=train_steps, args=(model, 0, 3))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    train_steps(model, 1, 3)
    for seed in range(2):
        train_steps(reference, seed, 3)
    for actual, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(actual.detach().cpu(), expected.detach())


def test_cpu_tensors_keep_torchs_sharing():
    context = mp.get_context("spawn")
    queue = context.Queue()
    tensor = torch.arange(4.0)
    queue.put(tensor)
    received = queue.get(timeout=60)
    assert received.device.type == "cpu"
    torch.testing.assert_close(received, tensor)


def receive_or_report(tensors, results):
    try:
        results.put(("received", str(tensors.get(timeout=60).device)))
    except Exception as error:  # noqa: BLE001 - the error is what the test checks
        results.put(("error", f"{type(error).__name__}: {error}"))


def test_a_receiver_that_cannot_map_the_memory_raises():
    tensor = torch.ones(3, device=f"{DEVICE}:1")
    torch.vdev.synchronize()  # vdev is initialised in this process before the fork
    expected = {
        "fork": "Cannot re-initialize vdev in forked subprocess",
        "spawn": "Invalid device index 1 for vdev",  # the receiver has one device
    }
    for method, message in expected.items():
        context = mp.get_context(method)
        tensors, results = context.Queue(), context.Queue()
        previous = os.environ.get("VDEV_DEVICE_COUNT")
        os.environ["VDEV_DEVICE_COUNT"] = "1"  # read by the spawned process only
        try:
            process = context.Process(target=receive_or_report, args=(tensors, results))
            process.start()
        finally:
            if previous is None:
                del os.environ["VDEV_DEVICE_COUNT"]
            else:
                os.environ["VDEV_DEVICE_COUNT"] = previous
        tensors.put(tensor)
        kind, text = results.get(timeout=60)
        assert kind == "error" and message in text, text
        process.join(timeout=60)


def pickle_inherited_tensor(tensor, results):
    try:
        ForkingPickler.dumps(tensor)
        results.put("pickled")
    except RuntimeError as error:
        results.put(str(error))


def test_memory_that_cannot_be_shared_raises_in_the_sender():
    """Sharing moves a storage's memory into shared memory; memory whose address
    something else holds cannot move, and a forked process cannot use vdev: the sender
    raises naming why, before anything is sent, and stays usable."""
    owner = torch.arange(4.0, device=DEVICE)
    # Memory of vdev's device that vdev's allocator does not own (another owner's).
    borrowed = torch.empty(0, device=DEVICE).set_(torch._C._construct_storage_from_data_pointer(
        owner.data_ptr(), owner.device, owner.untyped_storage().nbytes()))
    with pytest.raises(RuntimeError, match=f"its memory does not come from {DEVICE}'s allocator"):
        ForkingPickler.dumps(borrowed)
    torch.testing.assert_close(borrowed.cpu(), torch.arange(4.0))

    # A graph's output: the graph's replays write its memory by address.
    static_input = torch.ones(3, device=DEVICE)
    graph = torch.vdev.VDEVGraph()
    with torch.vdev.graph(graph):
        static_output = static_input * 2
    with pytest.raises(RuntimeError, match="its memory belongs to a graph's private memory pool"):
        ForkingPickler.dumps(static_output)
    static_input.fill_(4.0)
    graph.replay()
    torch.testing.assert_close(static_output.cpu(), torch.full((3,), 8.0))
    # What the error suggests works.
    shared = ForkingPickler.loads(ForkingPickler.dumps(static_output.clone()))
    torch.testing.assert_close(shared.cpu(), torch.full((3,), 8.0))

    # A storage: as for CUDA storages, only tensors are shared.
    typed = torch.TypedStorage(wrap_storage=owner.untyped_storage(), dtype=owner.dtype, _internal=True)
    for storage in [owner.untyped_storage(), typed]:
        with pytest.raises(RuntimeError, match=f"Cannot pickle {DEVICE} storage; try pickling a {DEVICE} tensor"):
            ForkingPickler.dumps(storage)

    # A process forked after vdev was initialised holds the tensor but cannot use vdev.
    context = mp.get_context("fork")
    results = context.SimpleQueue()
    process = context.Process(target=pickle_inherited_tensor, args=(owner, results))
    process.start()
    message = results.get()
    process.join(timeout=60)
    assert "Cannot re-initialize vdev in forked subprocess" in message, message
    torch.testing.assert_close(owner.cpu(), torch.arange(4.0))


def test_what_the_sender_can_check_raises_in_the_sender():
    # The sender cannot know whether a receiver can map the memory (that raises in the
    # receiver, as for CUDA tensors); what it can check raises where it pickles.
    context = mp.get_context("spawn")
    non_leaf = torch.ones(2, device=DEVICE, requires_grad=True) * 2
    queue = context.SimpleQueue()  # pickles in put()
    try:
        try:
            queue.put(non_leaf)
        except RuntimeError as error:
            assert "Cowardly refusing to serialize non-leaf tensor" in str(error)
        else:
            raise AssertionError("put() of a non-leaf tensor that requires grad did not raise")
        queue.put(non_leaf.detach())  # the sender is still usable
        torch.testing.assert_close(queue.get().cpu(), torch.full((2,), 2.0))
    finally:
        queue.close()
