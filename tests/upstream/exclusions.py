# PyTorch test-suite tests that run_pytorch_tests.py does not instantiate for vdev,
# each with the reason (format: exclusion_rules.py). Their CPU twins still run and
# count as "cpu only" in the table. Backend gaps are not excluded: they stay failures.
# An entry is either a test its decorators already skip on vdev (it would only run,
# and fail for the reason given, with --bypass-device-restrictions), or one whose
# vdev failure is what CUDA does too, or what PyTorch 2.13 no longer supports.
# test_modules' test_to with swap=False, for the modules that have parameters (the others pass).
TO_KEEPS_PARAMETERS = (
    "expects Module.to('cpu') to keep each Parameter (.data set), which PyTorch does only between the dense "
    "backends TensorImpl::has_compatible_shallow_copy_type lists (CPU, CUDA, MPS, HIP, XPU, HPU, MTIA), never "
    "PrivateUse1; the test moves to the device only under cuda/xpu")
MODULES_WITH_PARAMETERS = (
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
    "ConvTranspose2d", "ConvTranspose3d", "Embedding", "GRU", "GRUCell", "GroupNorm", "InstanceNorm1d",
    "InstanceNorm2d", "InstanceNorm3d", "LSTM", "LSTMCell", "LayerNorm", "Linear", "LinearCrossEntropyLoss",
    "MultiheadAttention", "PReLU", "RMSNorm", "RNN", "RNNCell", "Transformer", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer",
)

# _refs.linspace's integer dtypes, which the OpInfo expects to fail on every device type it lists.
LINSPACE_INTEGER_ROUNDING = (
    "the OpInfo expects it to fail on cpu, cuda and xpu alike (DecorateInfo expectedFailure: _refs.linspace "
    "rounds integer steps unlike torch.linspace), as it does on vdev")

# test_dtypes of the ops whose uint8 input vdev refuses as CUDA's kernels do (claimed on the CPU only).
UINT8_UPSAMPLING_REFUSED_AS_ON_CUDA = (
    "the OpInfo claims uint8 on the CPU, not on CUDA, whose bilinear/bicubic kernels refuse it as vdev's do "
    "(tests/test_cuda_semantics.py); every other dtype matches the CPU's and CUDA's claims")
# Tests of the max pooling ops in integer dtypes, which vdev refuses as CUDA's kernels do (claimed on the CPU only).
INTEGER_MAX_POOLING_REFUSED_AS_ON_CUDA = (
    "the OpInfo claims integers on the CPU, not on CUDA, whose max_pool2d/3d_with_indices kernels refuse them as "
    "vdev's do (tests/test_accelerator_dtypes.py); every other dtype matches the CPU's and CUDA's claims")
# test_dtypes of CUDA's fused attention ops, which the OpInfos give bfloat16 on SM80+ GPUs only.
BFLOAT16_ATTENTION_AS_ON_SM80 = (
    "the OpInfo claims bfloat16 only on an SM80+ CUDA GPU (SM80OrLater, False without CUDA); vdev computes it "
    "as such a GPU does (tests/test_attention_kernels.py), and refuses the dtypes CUDA's kernels refuse")

TEST_EXCLUSIONS = {
    "TestShapeOps": {
        "test_diagonal_multidim": "@onlyCPU: compares against x.numpy() of the device tensor",
        "test_flip": "flips quantized tensors on the device in float32; PyTorch 2.13 deprecates quantized tensors, which vdev does not implement",
    },
    "TestOldViewOps": {
        "test_flatten": "flattens a quantized tensor made on the device; PyTorch 2.13 deprecates quantized tensors, which vdev does not implement",
        "test_ravel": "ravels a quantized tensor made on the device; PyTorch 2.13 deprecates quantized tensors, which vdev does not implement",
    },
    "TestSortAndSelect": {
        "test_stable_sort_against_numpy": "its non-CUDA branch index_fills a device tensor with CPU index tensors, which CUDA rejects too (device mismatch); only device_type 'cuda' skips it",
    },
    "TestIndexing": {
        "test_index_put_accumulate_with_optional_tensors": "@onlyCUDA: moves its values with .cuda()",
    },
    "TestTensorCreation": {
        "test_tensor_factory_gpu_type*": "@onlyCUDA: sets torch.cuda.*Tensor as the default tensor type",
    },
    "TestRandomTensorCreation": {
        "test_randperm_device_compatibility": "@onlyCUDA: builds torch.Generator(device='cuda')",
    },
    "TestOptimRenewed": {
        "test_state_dict_with_cuda_params": "@onlyCUDA: moves the parameters with .to(device='cuda')",
        "test_cpu_load_state_dict": "@onlyCUDA: moves the parameter with .to(device='cuda')",
        "test_peak_memory_foreach": "@onlyCUDA: reads torch.cuda's peak memory statistics",
        "test_*_large_tensor": "@onlyCUDA: needs 64-72 GB of device memory, which @largeTensorTest checks on CUDA only",
    },
    "TestModule": {
        "test_multiple_device_transfer": "@onlyCUDA: moves the module with .cuda() and torch.cuda.device",
        "test_memory_format_nn_GroupNorm_*": "expects a channels-last input gradient, which PyTorch's own native_group_norm backward formula (derivatives.yaml) makes contiguous on every device but CPU and XPU, CUDA's too; module_db skips it on cuda",
        "test_memory_format_nn_ReplicationPad2d_*": "expects CPU's channels-last output; CUDA's kernel (and the meta kernel) returns it contiguous, as vdev does; module_db skips it on cuda",
        "test_memory_format_nn_ReplicationPad3d_*": "expects CPU's channels-last output; CUDA's kernel (and the meta kernel) returns it contiguous, as vdev does; module_db skips it on cuda",
        "test_memory_format_nn_ReflectionPad3d_*": "expects CPU's channels-last output; CUDA's kernel (and the meta kernel) returns it contiguous, as vdev does; module_db skips it on cuda",
        **{f"test_to_nn_{module}_*swap_False_*": TO_KEEPS_PARAMETERS for module in MODULES_WITH_PARAMETERS},
    },
    "TestTorchDeviceType": {
        "test_broadcast_fn_map": "Tensor.map_ raises TypeError for any non-CPU tensor, CUDA's too; the test returns early on CUDA only",
        "test_broadcast_fn_map2": "Tensor.map2_ raises TypeError for any non-CPU tensor, CUDA's too; the test returns early on CUDA only",
        "test_tensor_storage_type": "expects torch.<X>Storage for any non-CUDA device; CUDA's is torch.cuda.<X>Storage, vdev's torch.vdev.<X>Storage (tests/test_tensors.py)",
        "test_grad_scaling_state_dict": "expects the scale to be a CPU torch.FloatTensor for any non-CUDA device; on CUDA it checks torch.cuda.FloatTensor",
        "test_grad_scaler_deprecated_warning": "builds torch.cpu.amp.GradScaler for any non-CUDA device and expects its warning to name torch.<device>.amp",
        "test_scatter_reduce_operations_to_large_input_complex*": "its multiply case expects complex scatter_(reduce='multiply') to work on every device but CUDA (scatter_allow_reduce), whose kernel refuses it as vdev does (tests/test_cuda_semantics.py)",
        "test_scatter_reduce_scalar_complex*": "its multiply case expects complex scatter_(reduce='multiply') to work on every device but CUDA (scatter_allow_reduce), whose kernel refuses it as vdev does (tests/test_cuda_semantics.py)",
        "test_scatter_reduce_non_unique_index_complex*": "its multiply case expects complex scatter_(reduce='multiply') to work on every device but CUDA (scatter_allow_reduce), whose kernel refuses it as vdev does (tests/test_cuda_semantics.py)",
    },
    "TestBinaryUfuncs": {
        "test_type_promotion__refs_copysign": "passes a CPU scalar tensor as divisor, which _refs.copysign's own device check refuses for any non-CPU dividend, CUDA's too",
        "test_fmod_remainder_by_zero_integral": "expects CUDA's undefined-behaviour bit patterns for integer fmod/remainder by zero on any device but CPU and ROCm; vdev raises ZeroDivisionError as CPU does",
    },
    "TestNNDeviceType": {
        "test_large_max_pool2d_ch_last": "@onlyCUDA: needs 20 GB of device memory, which @largeTensorTest checks on CUDA only (bypassed, it took 21 GB of this 24 GB machine's RAM and was OOM-killed)",
        "test_one_hot": "expects one_hot to check class values at the call on every device but CUDA, XLA and MPS; ATen's one_hot skips that host sync for PrivateUse1 as for CUDA, and the out-of-range value raises from the scatter at the next synchronization, as CUDA's device assert does",
        "test_upsamplingBiMode2d_consistency_*": "resizes uint8 images with bilinear/bicubic and skips on CUDA, whose kernels refuse uint8 as vdev's do (tests/test_cuda_semantics.py)",
        "test_transformerencoderlayer_float32": "expects only CPU and CUDA results to come from TransformerEncoderLayer's fast path (fully masked rows NaN); PyTorch's fast path serves PrivateUse1 too (_supported_device_type), where vdev gives CPU's and CUDA's NaN",
        "test_upsamplingBiLinear2d_consistency_interp_size_bug_*": "resizes uint8 images with bilinear and skips on CUDA, whose kernel refuses uint8 as vdev's does (tests/test_cuda_semantics.py)",
    },
    "TestAsArray": {
        "test_*_from_numpy": "@onlyCPU: aliases a NumPy array, which only CPU memory can back",
        "test_*_from_buffer": "@onlyCPU: aliases a Python buffer, which only CPU memory can back",
    },
    "TestFakeTensor": {
        "test_fake_autocast_linalg_pinv_float32": "the test skips it on cpu and cuda (fake_autocast_device_skips, 'TODO: investigate/fix'): under autocast the fake result's dtype differs from the real one, float32 against float16, as on vdev",
        "test_fake_autocast_pinverse_float32": "the test skips it on cuda (fake_autocast_device_skips['cuda'], 'TODO: investigate/fix'): under CUDA's autocast policy, which vdev's follows, the fake result's dtype differs from the real one, float32 against float16",
        "test_fake_crossref_backward_*_nn_functional_bilinear_float32": "@onlyCUDA, disabled on CUDA (pytorch/pytorch#159150/#159151; the OpInfo's DecorateInfo skips name TestCommon): the backward views a zero-element tensor, whose real view shares its input's storage on every device while the fake one does not, as on vdev",
        "test_fake_crossref_backward_*_normal_number_mean_float32": "@onlyCUDA, and the OpInfo skips TestFakeTensor on cuda ('AssertionError in CUDA variant'): its samples pass mean and std as numbers, so no result requires grad and the test's own helper asserts, on any device",
    },
    "TestCommon": {
        "test_python_ref__refs_linspace_int*": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref__refs_linspace_uint8": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref_torch_fallback__refs_linspace_int*": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref_torch_fallback__refs_linspace_uint8": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref_torch_fallback__refs_linspace_tensor_overload_int*": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref_torch_fallback__refs_linspace_tensor_overload_uint8": LINSPACE_INTEGER_ROUNDING,
        "test_python_ref__refs_linspace_tensor_overload_*": "the OpInfo expects it to fail for every dtype on cpu and cuda alike (DecorateInfo expectedFailure: no _refs for aten.copy, integer rounding), as it does on vdev",
        "test_python_ref__refs_logspace_tensor_overload_*": "the OpInfo expects it to fail for every dtype on cpu and cuda alike (DecorateInfo expectedFailure: no _refs for aten.copy, integer rounding), as it does on vdev",
        "test_python_ref_errors__refs_where": "expects TensorIterator's same-device error from FakeTensors on a non-CPU device; the OpInfo expects CUDA and MPS to raise FakeTensor's 'not on the expected device cpu' instead (DecorateInfo expectedFailure, device_type='cuda'), as vdev does",
        "test_noncontiguous_samples_native_group_norm_*": "native_group_norm refuses noncontiguous input on every device (DecorateInfo expectedFailure for cpu, cuda and mps), with the same error on vdev",
        "test_numpy_ref_nn_functional_pdist_float64": "its reference calls scipy.spatial.distance.pdist, and SciPy is not installed here (not one of the design's packages): NameError on any device (the CPU skips every test_numpy_ref)",
        "test_dtypes_nn_functional_interpolate_bilinear": UINT8_UPSAMPLING_REFUSED_AS_ON_CUDA,
        "test_dtypes_nn_functional_interpolate_bicubic": UINT8_UPSAMPLING_REFUSED_AS_ON_CUDA,
        "test_dtypes_nn_functional_upsample_bilinear": UINT8_UPSAMPLING_REFUSED_AS_ON_CUDA,
        "test_dtypes__upsample_bilinear2d_aa": UINT8_UPSAMPLING_REFUSED_AS_ON_CUDA,
        "test_dtypes_nn_functional_max_pool2d": INTEGER_MAX_POOLING_REFUSED_AS_ON_CUDA,
        "test_dtypes_nn_functional_max_pool3d": INTEGER_MAX_POOLING_REFUSED_AS_ON_CUDA,
        "test_dtypes__refs_fft_*": "torch._refs.fft allows float16 only on device types cuda, meta and xpu (_promote_type_fft's list), so on PrivateUse1 the Python ref refuses the float16 its OpInfo inherits from fft.*'s CUDA claim; the torch.fft ops themselves take float16 on vdev as on CUDA (test_dtypes_fft_*)",
        "test_dtypes_torch_ops_aten__flash_attention_forward": BFLOAT16_ATTENTION_AS_ON_SM80,
        "test_dtypes_torch_ops_aten__efficient_attention_forward": BFLOAT16_ATTENTION_AS_ON_SM80,
        "test_out_randn_float32": "mirrors DecorateInfo(expectedFailure, 'TestCommon', 'test_out', device_type='cpu'): CPU's normal_ draws a noncontiguous out in another order than a contiguous one, and vdev draws the CPU generator's numbers by design (seeded results equal CPU's, tests/test_async_random.py)",
        "test_python_ref_torch_fallback__refs_nn_functional_pdist_float32": "mirrors DecorateInfo(expectedFailure, 'TestCommon', 'test_python_ref_torch_fallback', float32, device_type='cpu'): the ref's composite is farther from the float64 result than CPU's _pdist_forward kernel, which vdev runs (1.9e-5 against 1.2e-6 on vdev, as the OpInfo comment records for the CPU); PyTorch expects it to pass on CUDA, whose kernel is another",
        "test_python_ref_executor__refs_geometric_*": "@onlyCUDA, and the OpInfo skips it on cuda too ('Expected: geometric is not comparable': a random op, whose ref draws other numbers; its integer dtypes reach rand_like's check_uniform_bounds, which refuses them on every device)",
        "test_python_ref_executor__refs_linspace_executor_aten_int*": "@onlyCUDA, and the OpInfo expects it to fail on cuda and xpu (DecorateInfo expectedFailure for the integer dtypes); traced, the ref raises 'value argument of type float cannot be safely cast to type int' for them, as on vdev",
        "test_python_ref_executor__refs_linspace_executor_aten_uint8": "@onlyCUDA, and the OpInfo expects it to fail on cuda and xpu (DecorateInfo expectedFailure for the integer dtypes); traced, the ref raises 'value argument of type float cannot be safely cast to type int' for them, as on vdev",
        "test_python_ref_executor__refs_linspace_tensor_overload_executor_aten_int*": "@onlyCUDA, and the OpInfo expects it to fail on cuda and xpu (DecorateInfo expectedFailure for the integer dtypes); traced, the ref raises 'value argument of type float cannot be safely cast to type int' for them, as on vdev",
        "test_python_ref_executor__refs_linspace_tensor_overload_executor_aten_uint8": "@onlyCUDA, and the OpInfo expects it to fail on cuda and xpu (DecorateInfo expectedFailure for the integer dtypes); traced, the ref raises 'value argument of type float cannot be safely cast to type int' for them, as on vdev",
        "test_python_ref_executor__refs_log_normal_*": "@onlyCUDA, and the OpInfo skips it on cuda too ('Expected: log_normal is not comparable': a random op, whose ref draws other numbers)",
        "test_python_ref_executor__refs_nn_functional_alpha_dropout_*": "@onlyCUDA, and the OpInfo skips it on cuda too (a random op, whose traced ref draws other numbers)",
        "test_python_ref_executor__refs_nn_functional_nll_loss_*": "@onlyCUDA, and the OpInfo expects it to fail on cuda (DecorateInfo expectedFailure): traced, the ref reads a tensor's value (aten._local_scalar_dense), as on vdev",
        "test_multiple_devices_jiterator_*": "@onlyCUDA: the jiterator OpInfos test torch.cuda.jiterator, which compiles CUDA source at run time and raises 'Jiterator is only supported on CUDA and ROCm GPUs' on any other device",
        "test_multiple_devices_nn_functional_max_pool2d_int64": INTEGER_MAX_POOLING_REFUSED_AS_ON_CUDA,
        "test_multiple_devices_nn_functional_max_pool3d_int64": INTEGER_MAX_POOLING_REFUSED_AS_ON_CUDA,
    },
}
