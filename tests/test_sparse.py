"""Sparse COO tensors on vdev: made, converted and computed on as on the CPU, with
their indices and values in device memory."""

import pytest
import torch
from torch.testing import assert_close

import torch_vdev

DENSE = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])


def test_to_sparse_keeps_indices_and_values_on_the_device():
    sparse = DENSE.to("vdev").to_sparse()
    assert (sparse.device.type, sparse.layout) == ("vdev", torch.sparse_coo)
    assert sparse._indices().device.type == "vdev" and sparse._values().device.type == "vdev"
    assert_close(sparse.cpu(), DENSE.to_sparse())
    assert_close(sparse.to_dense().cpu(), DENSE)


def test_made_on_the_device_or_moved_there():
    made = torch.sparse_coo_tensor([[0, 1, 1], [1, 0, 2]], [1.5, 2.0, -3.0], (2, 3), device="vdev")
    moved = DENSE.to_sparse().to("vdev")
    assert made.device.type == moved.device.type == "vdev"
    assert_close(made.to_dense().cpu(), DENSE)
    assert_close(moved.to_dense().cpu(), DENSE)



@pytest.mark.parametrize(
    "make",
    [
        lambda: DENSE.to("vdev:1").to_sparse(),
        lambda: torch.sparse_coo_tensor([[0, 1, 1], [1, 0, 2]], [1.5, 2.0, -3.0], (2, 3), device="vdev:1"),
        lambda: DENSE.to_sparse().to("vdev:1"),
        lambda: torch.empty((2, 3), layout=torch.sparse_coo, device="vdev:1"),
    ],
    ids=["to_sparse", "sparse_coo_tensor", "moved", "empty"],
)
def test_made_on_a_device_that_is_not_current(make):
    # Made with vdev:0 current, as CUDA's factories do on cuda:1 (they make the tensor
    # with its device current): everything on vdev:1, no internal assertion.
    assert torch.vdev.current_device() == 0
    sparse = make()
    assert sparse.device == sparse._indices().device == sparse._values().device == torch.device("vdev:1")
    assert torch.vdev.current_device() == 0

@pytest.mark.parametrize(
    "compute",
    [
        lambda s, d: (s + s).to_dense(),
        lambda s, d: (s * 2).coalesce().values(),
        lambda s, d: torch.sparse.mm(s, d.t()),
        lambda s, d: torch.sparse.sum(s, dim=1).to_dense(),
        lambda s, d: s.t().coalesce().indices(),
        lambda s, d: d.sparse_mask(s.coalesce()).to_dense(),
    ],
)
def test_ops_match_cpu(compute):
    expected = compute(DENSE.to_sparse(), DENSE)
    actual = compute(DENSE.to("vdev").to_sparse(), DENSE.to("vdev"))
    assert actual.device.type == "vdev"
    assert_close(actual.cpu(), expected)


def test_in_place_ops_update_the_tensor_itself():
    sparse = DENSE.to("vdev").to_sparse()
    alias = sparse
    sparse.add_(DENSE.to("vdev").to_sparse())
    assert alias is sparse
    assert_close(sparse.to_dense().cpu(), 2 * DENSE)


def test_sparse_gradients_match_cpu():
    def grad_of(device):
        weight = DENSE.to(device).requires_grad_()
        (weight.to_sparse() * 3).to_dense().sum().backward()
        return weight.grad

    assert_close(grad_of("vdev").cpu(), grad_of("cpu"))
