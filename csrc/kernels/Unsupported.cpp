// Tensors the neuron device cannot hold, refused with errors that say what to do:
//  - quantized tensors (qint8, quint8, qint32, ...): TorchNeuron has no quantized tensors and
//    no quantized kernels;
//  - sparse layouts (COO, CSR, CSC, BSR, BSC) and opaque ones (mkldnn): the device's tensors
//    are dense and strided.
// Two ways reach them: an op whose CPU kernel returns such a tensor (quantize_per_tensor of
// a neuron tensor, to_sparse, ...), checked where the generic path adopts a result
// (check_device_can_hold, HostViews.h); and an op dispatched for a quantized or sparse neuron
// tensor that does not exist yet (torch.empty(..., dtype=torch.qint8, device="neuron"),
// .to("neuron") of a quantized or sparse CPU tensor), refused by the fallbacks below for the
// dispatch keys QuantizedPrivateUse1, SparsePrivateUse1 and SparseCsrPrivateUse1.
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include "../OpTracking.h"
#include "../HostViews.h"
#include "../Launch.h"
#include "Generic.h"
#include "KernelBody.h"

namespace torch_neuron {

namespace {
constexpr const char* kQuantizedAdvice =
    "The neuron device has no quantized tensors (TorchNeuron has no quantized kernels either). "
    "Quantize and dequantize on the CPU (e.g. torch.quantize_per_tensor(x.cpu(), ...), "
    "q.dequantize().to('neuron')), or keep integer values and their scale as plain tensors "
    "on the device.";
constexpr const char* kDenseOnlyAdvice =
    "The neuron device holds dense strided tensors only. Use a dense tensor (.to_dense()) on "
    "the device, or keep this one on the CPU.";

std::string op_name_of_call() {
  const TrackedOp* op = current_op();
  return op ? op->name() : std::string("this op");
}
}  // namespace

void check_device_can_hold(const at::Tensor& result) {
  TORCH_CHECK_NOT_IMPLEMENTED(!result.is_quantized(), op_name_of_call(), " on the neuron device: its result is a ",
                              "quantized tensor (", result.scalar_type(), "). ", kQuantizedAdvice);
  TORCH_CHECK_NOT_IMPLEMENTED(result.layout() == at::kStrided, op_name_of_call(),
                              " on the neuron device: its result has layout ", result.layout(), ". ", kDenseOnlyAdvice);
}

namespace {
void refuse_quantized(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.operator_name(),
                              "' for a quantized tensor on the neuron device. ", kQuantizedAdvice);
}

void refuse_sparse(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", op.operator_name(),
                              "' for a sparse tensor on the neuron device. ", kDenseOnlyAdvice);
}
}  // namespace

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

}  // namespace torch_neuron
