// _C.ProcessGroupNeuron and its factory, for the registration in torch_neuron_sim/distributed.py.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/chrono.h>

#include "HierarchicalCollectives.h"
#include "ProcessGroupNeuron.h"

#include "../../runtime/collectives.h"

namespace torch_neuron {
namespace {

// A holder that drops its reference with the GIL released: destroying a group joins the
// transport's threads, whose callbacks may need the GIL (as torch's own c10d bindings do).
template <typename T>
class NoGilDestructor {
 public:
  NoGilDestructor() = default;
  explicit NoGilDestructor(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}
  explicit NoGilDestructor(T* impl) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
  NoGilDestructor(const NoGilDestructor&) = default;
  NoGilDestructor(NoGilDestructor&&) noexcept = default;
  NoGilDestructor& operator=(const NoGilDestructor&) = default;
  NoGilDestructor& operator=(NoGilDestructor&&) noexcept = default;
  ~NoGilDestructor() {
    if (impl_ && PyGILState_Check()) {
      pybind11::gil_scoped_release release;
      impl_.reset();
    }
  }
  T* get() const { return impl_.get(); }
  T& operator*() const { return *impl_; }
  T* operator->() const { return impl_.get(); }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace
}  // namespace torch_neuron

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_neuron::NoGilDestructor<T>, true)

namespace torch_neuron {

void bind_distributed(pybind11::module& m) {
  namespace py = pybind11;
  // The base class c10d.Backend is registered by torch's c10d module.
  py::module::import("torch.distributed");
  py::class_<ProcessGroupNeuron, c10d::Backend, NoGilDestructor<ProcessGroupNeuron>>(
      m, "ProcessGroupNeuron", "The c10d backend 'neuron' (Note [ProcessGroupNeuron])")
      .def_property_readonly("device", &ProcessGroupNeuron::device)
      .def_property_readonly("timeout", &ProcessGroupNeuron::timeout);
  m.def(
      "_make_process_group_neuron",
      [](const py::object& transport, const py::object& store, int rank, int size, std::chrono::milliseconds timeout,
         int device, std::vector<int> hosts, const py::object& leaders) {
        auto backend = c10::intrusive_ptr<c10d::Backend>::reclaim_copy(&transport.cast<c10d::Backend&>());
        c10::intrusive_ptr<c10d::Store> rendezvous;
        if (!store.is_none()) rendezvous = c10::intrusive_ptr<c10d::Store>::reclaim_copy(&store.cast<c10d::Store&>());
        c10::intrusive_ptr<c10d::Backend> leader_group;
        if (!leaders.is_none()) {
          leader_group = c10::intrusive_ptr<c10d::Backend>::reclaim_copy(&leaders.cast<c10d::Backend&>());
        }
        c10::intrusive_ptr<ProcessGroupNeuron> group;
        {
          py::gil_scoped_release release;  // the shared-memory rendezvous waits for the other ranks
          group = c10::make_intrusive<ProcessGroupNeuron>(std::move(backend), std::move(rendezvous), rank, size, timeout,
                                                          c10::DeviceIndex(device), std::move(hosts),
                                                          std::move(leader_group));
        }
        return NoGilDestructor<ProcessGroupNeuron>(std::move(group));
      },
      py::arg("transport"), py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("device"),
      py::arg("hosts") = std::vector<int>(), py::arg("leaders") = py::none(),
      "A neuron process group over `transport` (a ProcessGroupGloo of the same store, rank and size); ranks on one "
      "host also meet through `store` for shared-memory collectives (None: Gloo only). `hosts`: each rank's host "
      "index; `leaders`: on each host's first rank of a group spanning hosts, a ProcessGroupGloo of those ranks "
      "(Note [Hierarchical collectives])");
  m.def("_host_key", &neuron_rt::host_key, "This host's locality key (hostname, boot id, network namespace)");
  m.def("_process_group_hierarchy", [](const py::object& backend) -> py::object {
    auto* hierarchy = backend.cast<ProcessGroupNeuron&>().hierarchy();
    if (!hierarchy) return py::none();
    py::dict info;
    info["hosts"] = hierarchy->host_of;
    info["local_size"] = hierarchy->local ? hierarchy->local->size() : 1;
    info["leader"] = hierarchy->leader;
    info["calls"] = hierarchy->calls.load();
    return info;
  }, "Note [Hierarchical collectives]: None, or the group's host layout and the collectives run in steps");
  m.def("_process_group_uses_shared_memory", [](const py::object& backend) {
    return backend.cast<ProcessGroupNeuron&>().uses_shared_memory();
  });
  m.def("_process_group_zero_copy", [](const py::object& backend) {
    return backend.cast<ProcessGroupNeuron&>().zero_copy_calls();
  }, "Shared-memory collectives of this group that moved bytes between the ranks' device memory directly "
     "(-1: zero-copy not set up)");
}

}  // namespace torch_neuron
