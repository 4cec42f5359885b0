// Host waits and the Python GIL.
//
// A task on a stream never needs the GIL (tasks hold runtime buffers and fresh host
// views, never tensors owned by Python; custom ops written in Python never run on a
// stream), so a wait cannot deadlock on it. Waits still release it, so that other Python
// threads run meanwhile, except where the caller may hold a lock that another Python thread
// takes while holding the GIL (a generator's mutex): releasing there would invert the two.
#pragma once

#include <Python.h>

#include <utility>

namespace torch_neuron {

// Runs `wait` with the GIL released when the calling thread holds it.
template <typename Wait>
decltype(auto) without_gil(Wait&& wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    struct Released {
      PyThreadState* state = PyEval_SaveThread();
      ~Released() { PyEval_RestoreThread(state); }
    } released;
    return std::forward<Wait>(wait)();
  }
  return std::forward<Wait>(wait)();
}

}  // namespace torch_neuron
