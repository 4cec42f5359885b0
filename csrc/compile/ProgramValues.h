// A program's values and arguments as the executor (compile/Executor.cpp) sees them: host
// tensors over device memory, views rebased on a call's storage, and the checks of a call's
// inputs, of a node's arguments against its op's schema and of a kernel's results (Note
// [Program loader checks] in runtime/program.h). Private to compile/.
//
// Thread safety: free functions that read only their arguments.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/program.h"

namespace torch_neuron {

// The dtype of a spec, stored as its ScalarType's code.
inline at::ScalarType scalar_type(int32_t code) { return static_cast<at::ScalarType>(code); }

// A CPU tensor over `data` (memory the caller keeps alive) with the spec's metadata.
at::Tensor host_tensor(void* data, size_t nbytes, const neuron_rt::TensorSpec& spec);
// A view's spec over `base`'s storage, `base` being this call's tensor for the value `base_spec`
// was compiled as.
neuron_rt::TensorSpec rebased(const neuron_rt::TensorSpec& view, const neuron_rt::TensorSpec& base_spec,
                              const at::Tensor& base);
// A tensor over `base`'s storage with `base`'s dispatch keys and `spec`'s dtype and metadata,
// made without the dispatcher.
at::Tensor view_of(const at::Tensor& base, const neuron_rt::TensorSpec& spec);
// An output that is a view of an input or of a fresh output, made by the dispatcher.
at::Tensor output_view(const at::Tensor& base, const neuron_rt::TensorSpec& spec,
                       const neuron_rt::TensorSpec& base_spec);
// Another TensorImpl with `t`'s storage and metadata, made without the dispatcher.
at::Tensor same_view(const at::Tensor& t);
// Fails unless `t`, input `index` of a call of the compiled graph `name`, is what the graph was
// compiled for: `spec`'s dtype, sizes and strides, on neuron:`device` (-1: on the host).
void check_input(const at::Tensor& t, const neuron_rt::TensorSpec& spec, size_t index, const std::string& name,
                 c10::DeviceIndex device);
// The IValue a node's argument stands for (a value's is filled per call).
c10::IValue argument_value(const neuron_rt::ProgramArg& arg);
// Why a program argument cannot stand for the schema argument `schema` (empty when it can).
std::string argument_mismatch(const c10::Argument& schema, const neuron_rt::ProgramArg& arg);
// Fails unless a kernel's result is a strided tensor inside its own storage.
void check_result(const at::Tensor& t, const std::string& op, const std::string& program);

}  // namespace torch_neuron
