// _C bindings of compiled programs (Note [Programs], Note [Executing programs]).
//
// Note [The program schema in Python]
// runtime/program.h defines the schema once; Python sees it only through these bindings:
//  - the kinds are bound enums, _C.ProgramValueKind (ProgramValue::Kind) and
//    _C.ProgramArgKind (ProgramArg::Kind), and the codes a kind's `integer` holds come from
//    _C.scalar_type_code / layout_code / memory_format_code (c10's own codes), so no number
//    of the format is written in Python;
//  - the compiler (compile/lowering.py) describes a program as a dict whose keys are the
//    members of ProgramDesc, ProgramNode and ProgramValue (a value's TensorSpec flattened into
//    it: dtype, sizes, strides, offset), each argument a tuple of ProgramArg's members in
//    order (kind, integer, real, list, reals, text); a kind is its enum or its number
//    (hand-written and mutated programs in tests give numbers);
//  - a program is loaded in one call: Program.from_desc(desc, device, cache, key) checks the
//    description (Note [Program loader checks]), builds the executor from it, encodes it
//    and stores it in the cache; Program.from_cache(cache, key, device) decodes the cached
//    payload once and builds the executor from what it decoded. Both give back the
//    executor, the payload's size and the sealed file (the cache artifact of
//    torch.compiler.save_cache_artifacts); the description stays readable on the executor
//    (metadata, describe(), payload()).
// The remaining functions (encode_program, describe_program, seal_program, ...) are for tests
// and tools that treat programs as data.
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include "../NeuronCommon.h"
#include "Executor.h"
#include "Pointwise.h"
#include "../kernels/DirectKernels.h"
#include "../kernels/SmallMatmul.h"
#include "runtime/program.h"
#include "runtime/program_cache.h"

namespace torch_neuron {
namespace {

namespace py = pybind11;
using neuron_rt::ProgramArg;
using neuron_rt::ProgramDesc;
using neuron_rt::ProgramValue;

// A kind given as its bound enum or as its number (at most `last`).
template <typename Kind>
Kind kind_from(py::handle h, Kind last) {
  if (py::isinstance<Kind>(h)) return h.cast<Kind>();
  const int number = h.cast<int>();
  if (number < 0 || number > int(last)) throw py::value_error("unknown program kind " + std::to_string(number));
  return Kind(number);
}

ProgramDesc program_from_dict(const py::dict& d) {
  ProgramDesc p;
  p.name = d["name"].cast<std::string>();
  for (const auto& item : d["values"].cast<py::list>()) {
    auto v = item.cast<py::dict>();
    ProgramValue value;
    value.kind = kind_from(v["kind"], ProgramValue::Kind::kDynamic);
    value.index = v["index"].cast<int64_t>();
    value.bytes = v["bytes"].cast<uint64_t>();
    value.on_host = v["on_host"].cast<bool>();
    value.spec.dtype = v["dtype"].cast<int32_t>();
    value.spec.sizes = v["sizes"].cast<std::vector<int64_t>>();
    value.spec.strides = v["strides"].cast<std::vector<int64_t>>();
    value.spec.offset = v["offset"].cast<int64_t>();
    p.values.push_back(std::move(value));
  }
  p.inputs = d["inputs"].cast<std::vector<int32_t>>();
  for (const auto& item : d["constants"].cast<py::list>()) p.constants.push_back(item.cast<std::string>());
  for (const auto& item : d["nodes"].cast<py::list>()) {
    auto n = item.cast<py::dict>();
    neuron_rt::ProgramNode node;
    node.op = n["op"].cast<std::string>();
    for (const auto& a : n["args"].cast<py::list>()) {
      auto t = a.cast<py::tuple>();
      ProgramArg arg;
      arg.kind = kind_from(t[0], ProgramArg::Kind::kMemoryFormat);
      arg.integer = t[1].cast<int64_t>();
      arg.real = t[2].cast<double>();
      arg.list = t[3].cast<std::vector<int64_t>>();
      arg.reals = t[4].cast<std::vector<double>>();
      arg.text = t[5].cast<std::string>();
      node.args.push_back(std::move(arg));
    }
    node.outputs = n["outputs"].cast<std::vector<int32_t>>();
    p.nodes.push_back(std::move(node));
  }
  p.outputs = d["outputs"].cast<std::vector<int32_t>>();
  p.arena_bytes = d["arena_bytes"].cast<uint64_t>();
  for (const auto& [k, v] : d["metadata"].cast<py::dict>()) p.metadata[k.cast<std::string>()] = v.cast<std::string>();
  return p;
}

// The inverse of program_from_dict, kinds as numbers (tests mutate programs as dicts, and an
// unchecked program may hold a number no enum names).
py::dict program_to_dict(const ProgramDesc& p) {
  py::dict d;
  d["name"] = p.name;
  py::list values;
  for (const ProgramValue& value : p.values) {
    py::dict v;
    v["kind"] = int(value.kind);
    v["index"] = value.index;
    v["bytes"] = value.bytes;
    v["on_host"] = value.on_host;
    v["dtype"] = value.spec.dtype;
    v["sizes"] = value.spec.sizes;
    v["strides"] = value.spec.strides;
    v["offset"] = value.spec.offset;
    values.append(v);
  }
  d["values"] = values;
  d["inputs"] = p.inputs;
  py::list constants;
  for (const auto& c : p.constants) constants.append(py::bytes(c));
  d["constants"] = constants;
  py::list nodes;
  for (const auto& node : p.nodes) {
    py::dict n;
    n["op"] = node.op;
    py::list args;
    for (const ProgramArg& arg : node.args) {
      args.append(py::make_tuple(int(arg.kind), arg.integer, arg.real, arg.list, arg.reals, arg.text));
    }
    n["args"] = args;
    n["outputs"] = node.outputs;
    nodes.append(n);
  }
  d["nodes"] = nodes;
  d["outputs"] = p.outputs;
  d["arena_bytes"] = p.arena_bytes;
  py::dict metadata;
  for (const auto& [k, v] : p.metadata) metadata[py::str(k)] = v;
  d["metadata"] = metadata;
  return d;
}

py::dict metadata_of(const ProgramDesc& p) {
  py::dict metadata;
  for (const auto& [k, v] : p.metadata) metadata[py::str(k)] = v;
  return metadata;
}

py::dict summary(const ProgramDesc& p) {
  py::dict d;
  d["name"] = p.name;
  d["values"] = p.values.size();
  d["nodes"] = p.nodes.size();
  d["inputs"] = p.inputs.size();
  d["outputs"] = p.outputs.size();
  d["constants"] = p.constants.size();
  d["arena_bytes"] = p.arena_bytes;
  py::list ops;
  for (const auto& node : p.nodes) ops.append(node.op);
  d["ops"] = ops;
  d["metadata"] = metadata_of(p);
  return d;
}

// What Program.from_desc / from_cache give back: (executor, payload bytes, sealed file or None).
py::tuple loaded(ProgramDesc desc, int device, const std::string& payload, const std::string& key) {
  auto executor = std::make_shared<ProgramExecutor>(std::move(desc), static_cast<c10::DeviceIndex>(device));
  py::object sealed = key.empty() ? py::object(py::none()) : py::object(py::bytes(neuron_rt::seal_program(key, payload)));
  return py::make_tuple(std::move(executor), payload.size(), std::move(sealed));
}

}  // namespace

void bind_programs(py::module& m) {
  m.def("program_profile", &program_profile, py::arg("reset") = false,
        "NEURON_SIM_PROGRAM_PROFILE=1: [(op, calls, seconds)] summed over the steps of every program run");
  // Note [The program schema in Python]: the kinds, and the codes their integers hold.
  py::enum_<ProgramValue::Kind>(m, "ProgramValueKind")
      .value("INPUT", ProgramValue::Kind::kInput)
      .value("CONSTANT", ProgramValue::Kind::kConstant)
      .value("ARENA", ProgramValue::Kind::kArena)
      .value("OUTPUT", ProgramValue::Kind::kOutput)
      .value("VIEW", ProgramValue::Kind::kView)
      .value("DYNAMIC", ProgramValue::Kind::kDynamic);
  py::enum_<ProgramArg::Kind>(m, "ProgramArgKind")
      .value("NONE", ProgramArg::Kind::kNone)
      .value("VALUE", ProgramArg::Kind::kValue)
      .value("INT", ProgramArg::Kind::kInt)
      .value("DOUBLE", ProgramArg::Kind::kDouble)
      .value("BOOL", ProgramArg::Kind::kBool)
      .value("INT_LIST", ProgramArg::Kind::kIntList)
      .value("DOUBLE_LIST", ProgramArg::Kind::kDoubleList)
      .value("BOOL_LIST", ProgramArg::Kind::kBoolList)
      .value("VALUE_LIST", ProgramArg::Kind::kValueList)
      .value("STRING", ProgramArg::Kind::kString)
      .value("DEVICE", ProgramArg::Kind::kDevice)
      .value("SCALAR_TYPE", ProgramArg::Kind::kScalarType)
      .value("LAYOUT", ProgramArg::Kind::kLayout)
      .value("MEMORY_FORMAT", ProgramArg::Kind::kMemoryFormat);
  m.def("scalar_type_code", [](at::ScalarType type) { return int(type); });
  m.def("layout_code", [](c10::Layout layout) { return int(layout); });
  m.def("memory_format_code", [](at::MemoryFormat format) { return int(format); });
  // Runs a fused pointwise code on CPU tensors (tests compare it with ATen's kernels).
  m.def("run_pointwise", [](const at::Tensor& out, const std::vector<at::Tensor>& inputs,
                            const std::vector<int64_t>& code, const std::vector<double>& scalars) {
    PointwiseCode program{int(inputs.size()), code, scalars};
    check_pointwise_code(program, "run_pointwise");
    for (const auto& t : inputs) TORCH_CHECK(t.device().is_cpu(), "run_pointwise: CPU tensors only");
    TORCH_CHECK(out.device().is_cpu(), "run_pointwise: CPU tensors only");
    run_pointwise(out, inputs, program);
  });
  // Note [Small bfloat16 matmuls]: whether a shape runs through the brgemm kernel (probing it
  // the first time), and the kernel itself on CPU tensors (tests compare it with at::mm).
  m.def("small_matmul_applies", &small_matmul_applies, py::arg("m"), py::arg("k"), py::arg("n"));
  m.def("small_matmul_calls", &small_matmul_calls);
  m.def("small_matmul_form", &small_matmul_form);
  // Note [Direct kernels]: the table, and the ops the executor runs directly (tests compare them).
  m.def("direct_ops", [] {
    py::list table;
    for (const DirectOp& op : direct_ops()) {
      py::list eager;
      for (const char* overload : op.eager) eager.append(overload);
      table.append(py::make_tuple(op.op, eager, op.program, op.why_not));
    }
    return table;
  });
  m.def("program_direct_ops", &program_direct_ops);
  auto check_shapes = [](const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const char* name) {
    TORCH_CHECK(out.device().is_cpu() && a.device().is_cpu() && b.device().is_cpu(), name, ": CPU tensors only");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0) && out.dim() == 2 && out.size(0) == a.size(0) &&
                    out.size(1) == b.size(1), name, ": shapes ", a.sizes(), " @ ", b.sizes(), " -> ", out.sizes(),
                " do not match");
  };
  m.def("small_matmul", [check_shapes](at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    check_shapes(out, a, b, "small_matmul");
    small_matmul(out, a, b);
  });
  // Tests: the kernel whatever the probe said (returns whether it ran).
  m.def("_small_matmul_unchecked", [check_shapes](at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
    check_shapes(out, a, b, "_small_matmul_unchecked");
    return small_matmul_unchecked(out, a, b);
  });
  // The dry run (python/torch_neuron_sim/dry_run.py): a lowered program's predicted cost per call
  // on `platform`, as the executor would cost it once built (DeviceClock.h, cost_of_program);
  // checked, never built. Returns (ns, fixed_ns, compute_ns, memory_ns), and with steps=True
  // also each step's (op, ns).
  m.def(
      "_cost_program",
      [](const py::dict& d, const std::string& platform, int logical_nc_config, bool steps) -> py::tuple {
        ProgramDesc desc = program_from_dict(d);
        NEURON_RT_CALL(neuron_rt::check_program(desc));
        std::vector<neuron_rt::WorkCost> per_step;
        const auto cost = cost_of_program(program_step_operands(desc, 0), platform, logical_nc_config,
                                          steps ? &per_step : nullptr);
        auto total = py::make_tuple(cost.ns, cost.fixed_ns, cost.compute_ns, cost.memory_ns);
        if (!steps) return total;
        py::list listed;
        for (size_t i = 0; i < per_step.size(); ++i) listed.append(py::make_tuple(desc.nodes[i].op, per_step[i].ns));
        return py::make_tuple(total, listed);
      },
      py::arg("desc"), py::arg("platform"), py::arg("logical_nc_config"), py::arg("steps") = false);
  m.def("encode_program", [](const py::dict& d) {
    auto p = program_from_dict(d);
    return py::bytes(neuron_rt::encode_program(p));
  });
  m.def("describe_program", [](const py::bytes& payload) {
    return summary(NEURON_RT_CALL(neuron_rt::decode_program(std::string(payload))));
  });
  // The structure of a payload as a dict, unchecked (tests mutate programs with it).
  m.def("program_dict_unchecked", [](const py::bytes& payload) {
    return program_to_dict(NEURON_RT_CALL(neuron_rt::parse_program_unchecked(std::string(payload))));
  });
  m.def("seal_program", [](const std::string& key, const py::bytes& payload) {
    return py::bytes(neuron_rt::seal_program(key, std::string(payload)));
  });
  m.def("unseal_program", [](const py::bytes& file, const std::string& key) {
    return py::bytes(NEURON_RT_CALL(neuron_rt::unseal_program(std::string(file), key)));
  });

  py::class_<ProgramExecutor, std::shared_ptr<ProgramExecutor>>(m, "Program")
      .def(py::init([](const py::bytes& payload, int device) {
             auto desc = NEURON_RT_CALL(neuron_rt::decode_program(std::string(payload)));
             return std::make_shared<ProgramExecutor>(std::move(desc), static_cast<c10::DeviceIndex>(device));
           }),
           py::arg("payload"), py::arg("device"))
      // Note [The program schema in Python]: a lowered program, loaded in one call. Checks it,
      // builds the executor (which checks each argument against its op's schema), and only
      // then encodes it and, given a cache, stores it under `key` (a program the executor
      // refuses is never cached).
      .def_static("from_desc",
                  [](const py::dict& d, int device, std::shared_ptr<neuron_rt::ProgramCache> cache, const std::string& key) {
                    ProgramDesc desc = program_from_dict(d);
                    NEURON_RT_CALL(neuron_rt::check_program(desc));
                    std::string payload = neuron_rt::encode_program(desc);
                    py::tuple result = loaded(std::move(desc), device, payload, cache ? key : std::string());
                    if (cache) cache->put(key, payload);
                    return result;
                  },
                  py::arg("desc"), py::arg("device"), py::arg("cache") = nullptr, py::arg("key") = "")
      // The program cached under `key`, decoded once, or None.
      .def_static("from_cache",
                  [](neuron_rt::ProgramCache& cache, const std::string& key, int device) -> py::object {
                    auto payload = cache.get(key);
                    if (!payload) return py::none();
                    auto desc = NEURON_RT_CALL(neuron_rt::decode_program(*payload));
                    return loaded(std::move(desc), device, *payload, key);
                  },
                  py::arg("cache"), py::arg("key"), py::arg("device"))
      // Without the GIL: run() may wait for another call of the program, or for a stream.
      .def("run", [](ProgramExecutor& self, const std::vector<at::Tensor>& inputs,
                     bool within_graph) { return self.run(inputs, within_graph); },
           py::arg("inputs"), py::arg("within_graph") = false, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("name", [](const ProgramExecutor& self) { return self.program().name; })
      .def_property_readonly("calls", &ProgramExecutor::calls)
      .def_property_readonly("direct_nodes", &ProgramExecutor::direct_nodes)
      .def_property_readonly("dispatched_nodes", &ProgramExecutor::dispatched_nodes)
      .def_property_readonly("arena_bytes", [](const ProgramExecutor& self) { return self.program().arena_bytes; })
      .def_property_readonly("metadata", [](const ProgramExecutor& self) { return metadata_of(self.program()); })
      // What describe_program gives for its payload.
      .def("describe", [](const ProgramExecutor& self) { return summary(self.program()); })
      // Its payload, encoded again (debug dumps).
      .def("payload", [](const ProgramExecutor& self) { return py::bytes(neuron_rt::encode_program(self.program())); });

  py::class_<neuron_rt::ProgramCache, std::shared_ptr<neuron_rt::ProgramCache>>(m, "ProgramCache")
      .def(py::init([](const std::string& directory, size_t max_entries, py::object report) {
             std::function<void(const std::string&)> callback;
             if (!report.is_none()) {
               callback = [report](const std::string& message) {
                 py::gil_scoped_acquire gil;
                 report(message);
               };
             }
             return std::make_shared<neuron_rt::ProgramCache>(directory, max_entries, callback);
           }),
           py::arg("directory"), py::arg("max_entries"), py::arg("report") = py::none())
      .def("get",
           [](neuron_rt::ProgramCache& self, const std::string& key) -> py::object {
             bool from_disk = false;
             auto payload = self.get(key, &from_disk);
             if (!payload) return py::none();
             return py::make_tuple(py::bytes(*payload), from_disk);
           })
      .def("put", [](neuron_rt::ProgramCache& self, const std::string& key,
                     const py::bytes& payload) { self.put(key, std::string(payload)); })
      .def("clear_memory", &neuron_rt::ProgramCache::clear_memory)
      .def_property_readonly("directory", &neuron_rt::ProgramCache::directory)
      .def_static("path_for", &neuron_rt::ProgramCache::path_for)
      .def_static("default_directory", &neuron_rt::ProgramCache::default_directory);
}

}  // namespace torch_neuron
