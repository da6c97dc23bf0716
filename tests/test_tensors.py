"""Creating vdev tensors, printing them, and moving data between CPU and devices."""

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

is_vdev_impl = torch_vdev._C.is_vdev_tensor_impl


@pytest.mark.parametrize(
    "factory",
    [
        lambda **kw: torch.zeros(3, 4, **kw),
        lambda **kw: torch.ones(2, 5, dtype=torch.float64, **kw),
        lambda **kw: torch.full((3,), 7, dtype=torch.int32, **kw),
        lambda **kw: torch.arange(10, **kw),
        lambda **kw: torch.linspace(0, 1, 11, **kw),
        lambda **kw: torch.eye(4, **kw),
        lambda **kw: torch.tensor([[1.5, -2.0], [3.0, 4.25]], **kw),
        lambda **kw: torch.tensor([True, False], **kw),
        lambda **kw: torch.tensor([1 + 2j, -3j], **kw),
    ],
)
def test_factories_match_cpu(factory):
    on_device = factory(device="vdev")
    assert on_device.device == torch.device("vdev", 0)
    assert is_vdev_impl(on_device)
    assert_close(on_device.cpu(), factory(device="cpu"))


def test_empty_and_empty_strided():
    empty = torch.empty(2, 3, device="vdev")
    assert empty.shape == (2, 3) and empty.is_contiguous()
    strided = torch.empty_strided((2, 3), (1, 2), device="vdev")
    assert strided.stride() == (1, 2)
    channels_last = torch.empty(2, 3, 4, 5, device="vdev", memory_format=torch.channels_last)
    assert channels_last.is_contiguous(memory_format=torch.channels_last)
    assert torch.empty(0, device="vdev").numel() == 0


def test_privateuseone_alias_names_vdev():
    tensor = torch.randn(3, device="privateuseone")
    assert tensor.device == torch.device("vdev:0")
    assert tensor.is_vdev and not tensor.is_cpu


def test_printing_shows_device_and_values():
    tensor = torch.tensor([1.0, 2.5], device="vdev:1")
    text = repr(tensor)
    assert "device='vdev:1'" in text and "2.5000" in text
    assert "device='vdev:0'" in repr(torch.zeros(2, 2, device="vdev"))


def test_round_trip_cpu_device_cpu():
    source = torch.randn(4, 5)
    assert_close(source.to("vdev").cpu(), source, rtol=0, atol=0)
    assert_close(source.vdev().to("cpu"), source, rtol=0, atol=0)


def test_copy_between_devices():
    source = torch.randn(6, 7)
    on_first = source.to("vdev:0")
    on_second = on_first.to("vdev:1")
    assert on_second.device == torch.device("vdev:1")
    assert on_second.data_ptr() != on_first.data_ptr()
    assert_close(on_second.cpu(), source, rtol=0, atol=0)


def test_non_contiguous_and_dtype_converting_copies():
    source = torch.randn(5, 6)
    device_t = source.to("vdev").t()
    assert not device_t.is_contiguous()
    assert_close(device_t.cpu(), source.t(), rtol=0, atol=0)
    assert_close(source.t().to("vdev").cpu(), source.t(), rtol=0, atol=0)
    converted = source.to("vdev", dtype=torch.float64)
    assert converted.dtype == torch.float64
    assert_close(converted.cpu(), source.double())
    destination = torch.zeros(6, 5, dtype=torch.int64, device="vdev:1")
    destination.copy_(device_t * 10)
    assert_close(destination.cpu(), (source.t() * 10).long())
    broadcast = torch.zeros(3, 4, device="vdev")
    broadcast.copy_(torch.arange(4.0))
    assert_close(broadcast.cpu(), torch.arange(4.0).expand(3, 4))



@pytest.mark.parametrize(
    "case",
    [
        # (destination, source) on CPU; each runs as the same copy_ between vdev tensors
        lambda: (torch.zeros(1), torch.rand(1)),
        lambda: (torch.zeros(5, 6, dtype=torch.int64), torch.randn(6, 5).t() * 10),
        lambda: (torch.zeros(3, 4), torch.arange(4.0)),
        lambda: (torch.zeros(4, dtype=torch.complex64), torch.randn(4, dtype=torch.complex64).conj()),
        lambda: (torch.zeros(4), -torch.randn(4)),
        lambda: (torch.zeros(0, 3), torch.randn(0, 3)),
    ],
)
def test_copy_between_vdev_tensors_matches_cpu(case):
    """copy_ between vdev tensors (vdev's own copy_, launched on the stream) writes
    what CPU's copy_ writes, and returns its destination."""
    cpu_destination, cpu_source = case()
    destination, source = cpu_destination.to("vdev"), cpu_source.to("vdev")
    if cpu_source.is_conj():
        source = cpu_source.conj().to("vdev").conj()  # the same lazy conjugate on vdev
    assert source.is_conj() == cpu_source.is_conj()
    result = destination.copy_(source)
    assert result is destination
    assert_close(destination.cpu(), cpu_destination.copy_(cpu_source), rtol=0, atol=0)


def test_copy_onto_itself_and_overlapping_copies_match_cpu():
    tensor = torch.arange(6.0)
    on_device = tensor.to("vdev")
    on_device.copy_(on_device)
    assert_close(on_device.cpu(), tensor, rtol=0, atol=0)
    # A partial overlap is refused at the call, with CPU's error.
    with pytest.raises(RuntimeError) as cpu_error:
        tensor[1:].copy_(tensor[:-1])
    with pytest.raises(RuntimeError) as vdev_error:
        on_device[1:].copy_(on_device[:-1])
    assert str(vdev_error.value) == str(cpu_error.value)
    # Overlapping views of one storage are copied as on CPU once they do not overlap.
    tensor[:3].copy_(tensor[3:])
    on_device[:3].copy_(on_device[3:])
    assert_close(on_device.cpu(), tensor, rtol=0, atol=0)


def test_item_and_tolist():
    tensor = torch.tensor([3.5, -1.0], device="vdev")
    assert tensor[0].item() == 3.5
    assert tensor.tolist() == [3.5, -1.0]
    assert torch.tensor(7, device="vdev").item() == 7
    assert bool(torch.tensor(True, device="vdev"))


def test_fill_and_zero():
    tensor = torch.empty(3, 3, device="vdev").fill_(2.5)
    assert_close(tensor.cpu(), torch.full((3, 3), 2.5))
    tensor[1].zero_()
    assert tensor.sum().item() == 15.0


def test_numpy_via_cpu():
    tensor = torch.arange(6, device="vdev").reshape(2, 3)
    assert tensor.cpu().numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(TypeError, match="vdev"):
        tensor.numpy()


def test_module_methods_move_parameters_in_place():
    # As with CUDA, a moved module keeps its Parameter objects, which take the moved data.
    module = torch.nn.Linear(3, 2)
    weight = module.weight
    expected = weight.detach().clone()
    module.vdev()
    assert module.weight is weight and weight.device == torch.device("vdev:0")
    module.to("vdev:1")
    assert module.weight is weight and weight.device == torch.device("vdev:1")
    assert_close(weight.detach().cpu(), expected)
    module.cpu()
    assert module.weight is weight and weight.device.type == "cpu"
    assert_close(weight.detach(), expected)


def test_parameters_made_on_vdev_stay_vdev_tensor_impls():
    module = torch.nn.Linear(3, 2, device="vdev")
    assert is_vdev_impl(module.weight)
    # A vdev TensorImpl cannot become a CPU tensor: moving replaces the Parameter.
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        module.weight.data = torch.zeros(2, 3)
    weight = module.weight
    module.cpu()
    assert module.weight is not weight and module.weight.device.type == "cpu"
    assert_close(module.weight.detach(), weight.detach().cpu())


def test_optimizer_made_before_moving_trains_the_moved_module():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 1)
    reference = torch.nn.Linear(3, 1)
    reference.load_state_dict(module.state_dict())
    initial = reference.weight.detach().clone()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    module.vdev()
    inputs = torch.randn(8, 3)
    for model, opt, x in ((module, optimizer, inputs.vdev()), (reference, reference_optimizer, inputs)):
        model(x).square().mean().backward()
        opt.step()
    assert module.weight.grad.device.type == "vdev"
    assert_close(module.weight.detach().cpu(), reference.weight.detach())
    assert not torch.equal(reference.weight.detach(), initial)  # the step did move the weights


def test_untyped_storage_is_on_device():
    tensor = torch.arange(4.0, device="vdev")
    storage = tensor.untyped_storage()
    assert storage.device == torch.device("vdev:0") and storage.is_vdev
    assert storage.nbytes() == 16
    assert_close(torch.tensor([], device="vdev").set_(storage).cpu(), torch.arange(4.0).view(torch.uint8).view(torch.float32))



@pytest.mark.parametrize(
    "dtype, name",
    [(torch.float32, "FloatStorage"), (torch.bool, "BoolStorage"), (torch.uint8, "ByteStorage"),
     (torch.complex128, "ComplexDoubleStorage"), (torch.bfloat16, "BFloat16Storage")],
)
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_legacy_storage_classes_name_the_device_like_cuda(dtype, name):
    # torch.cuda.FloatStorage's counterpart: storage_type() looks the class up in the
    # device's module (it was None on vdev), and the class makes vdev storages.
    legacy = getattr(torch.vdev, name)
    tensor = torch.zeros(3, dtype=dtype, device="vdev")
    assert tensor.storage_type() is legacy
    assert tensor.storage().type() == f"torch.vdev.{name}"
    assert isinstance(tensor.storage(), legacy)
    assert not isinstance(tensor.cpu().storage(), legacy)
    made = legacy(4)
    assert made.device == torch.device("vdev:0") and made.dtype == dtype and len(made) == 4
    assert torch.is_storage(made)

@pytest.fixture
def deterministic_algorithms():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous)


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.complex64, torch.float8_e5m2, torch.int8, torch.uint8,
     torch.int64, torch.uint64, torch.bool],
)
@pytest.mark.parametrize(
    "make_empty",
    [
        lambda dtype, device: torch.empty(5, dtype=dtype, device=device),
        lambda dtype, device: torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=device),
        lambda dtype, device: torch.empty_like(torch.zeros(4, device=device), dtype=dtype),
    ],
    ids=["empty", "empty_strided", "empty_like"],
)
def test_deterministic_empty_is_filled_as_on_cpu(deterministic_algorithms, dtype, make_empty):
    # As CPU and CUDA: NaN for floating types, the largest value for the others.
    expected = make_empty(dtype, "cpu")
    on_device = make_empty(dtype, "vdev")
    assert torch.equal(on_device.cpu().contiguous().view(torch.uint8), expected.contiguous().view(torch.uint8))


def test_complex32_empty_warns_it_is_experimental():
    torch.set_warn_always(True)
    try:
        with pytest.warns(UserWarning, match="ComplexHalf support is experimental"):
            torch.empty(2, dtype=torch.complex32, device="vdev")
    finally:
        torch.set_warn_always(False)


def test_lazy_clone_stays_shared_when_read():
    original = torch.arange(4.0, device="vdev")
    clone = torch._lazy_clone(original)
    total = original + clone
    torch.mul(original, clone)
    assert torch._C._is_cow_tensor(original) and torch._C._is_cow_tensor(clone)
    assert total.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def _channels(like, length):
    # A batch of 2 with 4 channels on `like`'s device, the same values on every device.
    return torch.arange(8.0 * length).reshape(2, 4, length).sin().to(like.device)


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.add_(1),
        lambda t: t.fill_(7),
        lambda t: t.copy_(torch.full((4,), 5.0)),
        lambda t: t.__setitem__(1, 9.0),
        lambda t: torch.mul(torch.ones(4, device=t.device), 3, out=t),
        lambda t: torch._foreach_add_([t], 1),
        # Batch norm updates its running statistics in place, which its schema does not mark written.
        lambda t: torch.native_batch_norm(_channels(t, 3), None, None, t, torch.ones(4, device=t.device), True, 0.5, 1e-5),
        lambda t: torch.native_batch_norm(
            _channels(t, 6)[..., ::2], None, None, torch.zeros(4, device=t.device), t, True, 0.5, 1e-5),
        lambda t: torch.batch_norm_update_stats(_channels(t, 3), t, torch.ones(4, device=t.device), 0.5),
    ],
    ids=[
        "in-place op", "fill_", "copy_", "setitem", "out=", "foreach op", "batch norm (launched)",
        "batch norm (strided)", "batch_norm_update_stats",
    ],
)
@pytest.mark.parametrize("written", ["clone", "original"])
def test_writing_a_lazy_clone_leaves_the_other_unchanged(write, written):
    cpu_original = torch.arange(4.0)
    cpu_clone = torch._lazy_clone(cpu_original)
    # The write copies the shared memory first, which must wait for the queued arange.
    torch.vdev._sleep(100)
    original = torch.arange(4.0, device="vdev")
    clone = torch._lazy_clone(original)
    write(clone if written == "clone" else original)
    write(cpu_clone if written == "clone" else cpu_original)
    assert_close(original.cpu(), cpu_original)
    assert_close(clone.cpu(), cpu_clone)
