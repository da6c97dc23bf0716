"""Expected failures of the device-generic suites, as data.

Key: (test class, test name, entry, dtype name or None for every dtype); value: a
one-line reason. Each entry is applied as `unittest.expectedFailure` through PyTorch's
DecorateInfo, so an entry that starts passing fails the run: this list only shrinks.
"""

_NO_COMPRESSED_SPARSE = "vdev has sparse COO tensors but no sparse compressed (CSR/CSC/BSR/BSC) ones"

EXPECTED_FAILURES = {
    **{
        ("TestOpInfo", test, "sparse.sampled_addmm", dtype): _NO_COMPRESSED_SPARSE
        for test in ("test_forward", "test_noncontiguous", "test_out")
        for dtype in ("float32", "complex64")
    },
    **{
        ("TestOpInfo", "test_grad", "sparse.sampled_addmm", dtype): _NO_COMPRESSED_SPARSE
        for dtype in ("float32", "float64")
    },
}
