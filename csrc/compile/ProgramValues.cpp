// A program's values and arguments as the executor sees them (ProgramValues.h).
#include "ProgramValues.h"

#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>
#include <ATen/ops/_neg_view.h>
#include <c10/core/StorageImpl.h>

#include "../NeuronCommon.h"

namespace torch_neuron {

using neuron_rt::ProgramArg;

// A CPU tensor over `data` (memory the caller keeps alive) with the spec's metadata.
at::Tensor host_tensor(void* data, size_t nbytes, const neuron_rt::TensorSpec& spec) {
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)),
      nullptr, /*resizable=*/false));
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                          c10::scalarTypeToTypeMeta(scalar_type(spec.dtype)));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(spec.sizes, spec.strides, spec.offset);
  return tensor;
}

// A view's spec over `base`'s storage, `base` being this call's tensor for the value `base_spec`
// was compiled as (Note [Program loader checks]: the view may not leave that storage).
neuron_rt::TensorSpec rebased(const neuron_rt::TensorSpec& view, const neuron_rt::TensorSpec& base_spec,
                              const at::Tensor& base) {
  return NEURON_RT_CALL(neuron_rt::rebase_view(view, base_spec, base.storage_offset(), base.storage().nbytes()));
}

at::Tensor view_of(const at::Tensor& base, const neuron_rt::TensorSpec& spec) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(base.storage()),
                                                          base.unsafeGetTensorImpl()->key_set(),
                                                          c10::scalarTypeToTypeMeta(scalar_type(spec.dtype)));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(spec.sizes, spec.strides, spec.offset);
  return tensor;
}

// An output that is a view of an input or of a fresh output, made by the dispatcher (as_strided:
// the caller gets a view of `base` with its version counter). A view may have another dtype than
// its base (view_as_real of a complex result, Tensor.view(dtype)): as_strided keeps the base's
// dtype, so the storage is first seen as bytes (a flat view, then view(kByte)), cut to a whole
// number of the view's elements, seen in the view's dtype, and the view's sizes, strides and offset
// (in its own elements: rebase_view checked they fit) taken there. An input with the negative bit
// (view(dtype) refuses it) is viewed without it and the view gets it back, as eager's does.
at::Tensor output_view(const at::Tensor& base, const neuron_rt::TensorSpec& spec, const neuron_rt::TensorSpec& base_spec) {
  const int64_t offset = rebased(spec, base_spec, base).offset;
  const at::ScalarType dtype = scalar_type(spec.dtype);
  if (base.scalar_type() == dtype) return base.as_strided(spec.sizes, spec.strides, offset);
  if (base.is_neg()) return at::_neg_view(output_view(at::_neg_view(base), spec, base_spec));
  const int64_t base_element = static_cast<int64_t>(base.element_size());
  const int64_t view_element = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t bytes = static_cast<int64_t>(base.storage().nbytes()) / base_element * base_element;
  return base.as_strided({bytes / base_element}, {1}, 0)
      .view(at::kByte)
      .narrow(0, 0, bytes / view_element * view_element)
      .view(dtype)
      .as_strided(spec.sizes, spec.strides, offset);
}

// Another TensorImpl with `t`'s storage and metadata, made without the dispatcher (the executor
// is built while a compile's FakeTensorMode may be active).
at::Tensor same_view(const at::Tensor& t) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(t.storage()), t.unsafeGetTensorImpl()->key_set(),
                                                          t.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return tensor;
}

void check_input(const at::Tensor& t, const neuron_rt::TensorSpec& spec, size_t index, const std::string& name,
                 c10::DeviceIndex device) {
  TORCH_CHECK(t.defined(), "compiled graph ", name, ": input ", index, " is None; expected a tensor");
  if (device < 0) {  // a host input (a CPU scalar tensor, as traced)
    TORCH_CHECK(t.device().is_cpu(), "compiled graph ", name, ": input ", index, " is on ", t.device(),
                "; the graph was compiled for a CPU tensor there");
  } else {
    TORCH_CHECK(t.device().type() == kNeuron && t.device().index() == device, "compiled graph ", name, ": input ",
                index, " is on ", t.device(), "; the graph was compiled for neuron:", int(device),
                ". Move it with .to('neuron:", int(device), "')");
  }
  TORCH_CHECK(t.scalar_type() == scalar_type(spec.dtype) && t.sizes() == c10::IntArrayRef(spec.sizes),
              "compiled graph ", name, ": input ", index, " is ", t.scalar_type(), t.sizes(), "; the graph was compiled for ",
              scalar_type(spec.dtype), c10::IntArrayRef(spec.sizes),
              " (torch.compile recompiles for new shapes; a direct call of the program must match)");
  bool same_strides = true;
  for (size_t d = 0; d < spec.sizes.size(); ++d) {
    if (spec.sizes[d] > 1 && t.strides()[d] != spec.strides[d]) same_strides = false;
  }
  TORCH_CHECK(same_strides, "compiled graph ", name, ": input ", index, " has strides ", t.strides(),
              "; the graph was compiled for ", c10::IntArrayRef(spec.strides));
}

c10::IValue argument_value(const ProgramArg& arg) {
  switch (arg.kind) {
    case ProgramArg::Kind::kNone: return c10::IValue();
    case ProgramArg::Kind::kInt: return c10::IValue(arg.integer);
    case ProgramArg::Kind::kDouble: return c10::IValue(arg.real);
    case ProgramArg::Kind::kBool: return c10::IValue(arg.integer != 0);
    case ProgramArg::Kind::kIntList: return c10::IValue(c10::List<int64_t>(arg.list));
    case ProgramArg::Kind::kDoubleList: return c10::IValue(c10::List<double>(arg.reals));
    case ProgramArg::Kind::kBoolList: {
      c10::List<bool> list;
      for (int64_t v : arg.list) list.push_back(v != 0);
      return c10::IValue(list);
    }
    case ProgramArg::Kind::kString: return c10::IValue(arg.text);
    case ProgramArg::Kind::kDevice: return c10::IValue(c10::Device(c10::DeviceType::CPU));  // kernels run on host views
    case ProgramArg::Kind::kScalarType: return c10::IValue(arg.integer);
    case ProgramArg::Kind::kLayout: return c10::IValue(arg.integer);
    case ProgramArg::Kind::kMemoryFormat: return c10::IValue(arg.integer);
    case ProgramArg::Kind::kValue:
    case ProgramArg::Kind::kValueList: return c10::IValue();  // filled per call
  }
  return c10::IValue();
}

// Why a program argument cannot stand for the schema argument `schema` (empty when it can):
// it must be of a kind the compiler makes for the argument's type (lowering.py's _arg), so
// that the kernel receives the IValue its type promises; a tensor must come from a value
// (or be a Python number, which becomes a wrapped number), None only where the type is
// optional. The runtime's loader checks everything that does not need the schema.
std::string argument_mismatch(const c10::Argument& schema, const ProgramArg& arg) {
  using Kind = ProgramArg::Kind;
  c10::TypePtr type = schema.real_type();
  bool optional = false;
  if (auto inner = type->cast<c10::OptionalType>()) {
    optional = true;
    type = inner->getElementType();
  }
  if (arg.kind == Kind::kNone) {
    return optional || type->kind() == c10::TypeKind::GeneratorType ? "" : "None for a value that is not optional";
  }
  const bool number = arg.kind == Kind::kInt || arg.kind == Kind::kDouble || arg.kind == Kind::kBool;
  auto expect = [&](bool ok) { return ok ? std::string() : std::string("a program argument of kind ") +
                                               std::to_string(int(arg.kind)) + " for type " + type->str(); };
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return expect(arg.kind == Kind::kValue || number);
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
    case c10::TypeKind::NumberType: return expect(number);
    case c10::TypeKind::StringType: return expect(arg.kind == Kind::kString);
    // a functional collective's group (`Any group_name`): its registered name (Note [Collectives in programs])
    case c10::TypeKind::AnyType: return expect(arg.kind == Kind::kString);
    case c10::TypeKind::DeviceObjType: return expect(arg.kind == Kind::kDevice);
    // a generator at a saved state (Note [Random ops replayed in compiled graphs]); None: the device's default
    case c10::TypeKind::GeneratorType: return expect(arg.kind == Kind::kValue);
    case c10::TypeKind::ScalarTypeType: return expect(arg.kind == Kind::kScalarType);
    case c10::TypeKind::LayoutType: return expect(arg.kind == Kind::kLayout);
    case c10::TypeKind::MemoryFormatType: return expect(arg.kind == Kind::kMemoryFormat);
    case c10::TypeKind::ListType: {
      c10::TypePtr element = type->castRaw<c10::ListType>()->getElementType();
      const bool optional_elements = element->kind() == c10::TypeKind::OptionalType;
      if (optional_elements) element = element->castRaw<c10::OptionalType>()->getElementType();
      switch (element->kind()) {
        case c10::TypeKind::TensorType: {
          if (arg.kind != Kind::kValueList) return expect(false);
          for (int64_t id : arg.list) {
            if (id < 0 && !optional_elements) return "None in a list of tensors that may not hold None";
          }
          return "";
        }
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return expect(arg.kind == Kind::kIntList || arg.kind == Kind::kInt);
        case c10::TypeKind::FloatType: return expect(arg.kind == Kind::kDoubleList || arg.kind == Kind::kIntList);
        case c10::TypeKind::BoolType: return expect(arg.kind == Kind::kBoolList || arg.kind == Kind::kIntList);
        default: return "a list of " + element->str() + ", which programs cannot pass";
      }
    }
    default: return "an argument of type " + type->str() + ", which programs cannot pass";
  }
}

// A kernel's result is used (copied into its value's memory, or kept for later nodes to
// read) only when it is a strided tensor inside its own storage: a few ATen ops build tensors
// from their arguments without checking them (_reshape_alias, the sparse constructors), and
// a program's arguments are not to be trusted (Note [Program loader checks]).
void check_result(const at::Tensor& t, const std::string& op, const std::string& program) {
  if (!t.defined()) return;
  TORCH_CHECK(t.layout() == at::kStrided && t.has_storage(), "program ", program, ": ", op, " returned a ",
              t.layout(), " tensor; programs hold strided tensors only");
  if (t.numel() == 0) return;
  unsigned __int128 last = uint64_t(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    TORCH_CHECK(t.stride(d) >= 0, "program ", program, ": ", op, " returned a tensor with a negative stride");
    last += (unsigned __int128)(t.size(d) - 1) * uint64_t(t.stride(d));
  }
  const unsigned __int128 bytes = (last + 1) * t.element_size();
  TORCH_CHECK(bytes <= t.storage().nbytes(), "program ", program, ": ", op, " returned a tensor reaching byte ",
              uint64_t(bytes > UINT64_MAX ? UINT64_MAX : bytes), " of a storage of ", t.storage().nbytes(), " bytes");
}
}  // namespace torch_neuron
