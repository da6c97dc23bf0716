"""Sparse compressed tensors (CSR, CSC, BSR, BSC) on vdev: made, converted and computed
on as on the CPU, over component tensors in device memory, without copies."""

import pytest
import torch
from torch.testing import assert_close

DEVICE = torch._C._get_privateuse1_backend_name()
DENSE = torch.tensor([[0.0, 1.5, 0.0, 0.0], [2.0, 0.0, -3.0, 0.0], [0.0, 0.0, 0.0, 4.0], [1.0, 0.0, 0.0, 0.5]])

CONVERSIONS = {
    torch.sparse_csr: lambda t: t.to_sparse_csr(),
    torch.sparse_csc: lambda t: t.to_sparse_csc(),
    torch.sparse_bsr: lambda t: t.to_sparse_bsr((2, 2)),
    torch.sparse_bsc: lambda t: t.to_sparse_bsc((2, 2)),
}
LAYOUTS = list(CONVERSIONS)


def components(t):
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return t.crow_indices(), t.col_indices(), t.values()
    return t.ccol_indices(), t.row_indices(), t.values()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_conversions_and_components_match_cpu(layout):
    convert = CONVERSIONS[layout]
    expected = convert(DENSE)
    for actual in (convert(DENSE.to(DEVICE)), expected.to(DEVICE)):
        assert (actual.device.type, actual.layout) == (DEVICE, layout)
        for got, want in zip(components(actual), components(expected)):
            assert got.device.type == DEVICE
            assert_close(got.cpu(), want)
        assert_close(actual.to_dense().cpu(), DENSE)
        back = actual.cpu()
        assert back.layout == layout and back.device.type == "cpu"
        assert_close(back.to_dense(), DENSE)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_constructors_with_device_keep_the_components_without_copies(layout):
    parts = [p.to(DEVICE) for p in components(CONVERSIONS[layout](DENSE))]
    made = torch.sparse_compressed_tensor(*parts, DENSE.shape, layout=layout, device=DEVICE)
    assert made.device.type == DEVICE and made.layout == layout
    assert [p.data_ptr() for p in components(made)] == [p.data_ptr() for p in parts]
    assert_close(made.to_dense().cpu(), DENSE)


def test_named_constructors():
    crow, col, values = (p.tolist() for p in components(DENSE.to_sparse_csr()))
    made = torch.sparse_csr_tensor(crow, col, values, DENSE.shape, device=DEVICE)
    assert made.device.type == DEVICE
    assert_close(made.to_dense().cpu(), DENSE)
    ccol, row, values = (p.tolist() for p in components(DENSE.to_sparse_csc()))
    assert_close(torch.sparse_csc_tensor(ccol, row, values, DENSE.shape, device=DEVICE).to_dense().cpu(), DENSE)


def test_in_place_ops_write_the_components_themselves():
    sparse = DENSE.to(DEVICE).to_sparse_csr()
    values = sparse.values()
    sparse.mul_(2)
    assert sparse.values().data_ptr() == values.data_ptr()
    assert_close(values.cpu(), 2 * DENSE.to_sparse_csr().values())


@pytest.mark.parametrize(
    "compute",
    [
        lambda s, d: s @ d,
        lambda s, d: torch.mm(s, d.t()),
        lambda s, d: torch.addmm(d, s, d, beta=0.5, alpha=2.0),
        lambda s, d: torch.sparse.addmm(d, s, d),
        lambda s, d: torch.sparse.sampled_addmm(s, d, d.t()).to_dense(),
        lambda s, d: (s * 3).to_dense(),
        lambda s, d: (s + s).to_dense(),
        lambda s, d: s.neg().abs().to_dense(),
        lambda s, d: s.to_sparse_coo().to_dense(),
        lambda s, d: s.transpose(0, 1).to_dense(),
        lambda s, d: torch.sparse.sum(s.to_sparse_coo(), dim=0).to_dense(),
        lambda s, d: torch.mv(s, d[0]),
    ],
)
def test_ops_match_cpu(compute):
    expected = compute(DENSE.to_sparse_csr(), DENSE)
    actual = compute(DENSE.to(DEVICE).to_sparse_csr(), DENSE.to(DEVICE))
    assert actual.device.type == DEVICE
    assert_close(actual.cpu(), expected)


def test_gradient_of_the_dense_operand_matches_the_dense_formula():
    grad_output = torch.arange(16.0).reshape(4, 4)
    dense = DENSE.to(DEVICE).requires_grad_()
    (grad,) = torch.autograd.grad(DENSE.to(DEVICE).to_sparse_csr() @ dense, dense, grad_output.to(DEVICE))
    assert_close(grad.cpu(), DENSE.t() @ grad_output)
