// The process-wide threads that finish collectives off the transports' threads: the completion
// threads (Note [Completion threads]), the releaser (Note [Releasing a Work off the transport's
// threads]) and what Python's atexit does with both (Note [Completions at exit]).
//
// Thread safety: every function may be called from any thread. One pool and one releaser per
// process, made at first use; a forked child makes its own (its parent's threads are not in
// it). Neither is ever freed: detached threads may still use them at exit.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

namespace torch_neuron {

// Note [Completion threads]
// Point-to-point works (Gloo's send and recv have no future) are waited for here, never on
// the transport's one thread, and their futures completed (with the callbacks chained on
// them: the user's code, which may block). A task never waits for a busy thread: when every
// thread is busy a new one starts. Threads left idle for a minute end.
//
// Note [Completions at exit]
// Completing a future runs its callbacks (Python ones among them) and drops them and its
// value, which take the GIL; once Python finalizes, taking it ends the thread (pthread_exit),
// which inside a noexcept destructor is std::terminate. So:
//  - a completion counts from when it is posted until it ended, and Python's atexit
//    (quiesce_collectives_for_exit) waits for the count to reach zero, up to a limit;
//  - a completion that starts once Python finalizes (may_run() is false) leaves its future
//    and references to the process's exit;
//  - a completion that starts after our atexit (exiting()) takes the GIL first and holds it
//    until all it holds is dropped, so Python's finalization waits for it;
//  - before our atexit, a completion does not take the GIL of its own: a thread waiting on
//    the future while holding it (torch.jit.wait) would wait forever.
// Limits: after our atexit (in a handler registered before `import torch`), waiting on a
// point-to-point future with the GIL held waits forever; a completion still running when the
// limit passes, with a callback that releases the GIL, can still meet the finalization.
// NeuronWork::complete() is the one that posts completions.
class CompletionThreads {
 public:
  static CompletionThreads& get();

  // Runs `task` on a completion thread; a task that throws is ignored (tasks report their
  // errors through their Work's future).
  void post(std::function<void()> task);
  // As post(), counted for Python's atexit (Note [Completions at exit]): what `completion`
  // holds is dropped before it counts as ended.
  void post_completion(std::function<void()> completion);
  // Whether a completion may run now (Python is not finalizing).
  static bool may_run();
  // Set by Python's atexit: from then on a completion takes the GIL before it starts.
  bool exiting() const { return exiting_.load(); }
  // Python's atexit: sets exiting() and waits up to `limit` for the posted completions.
  void wait_for_exit(std::chrono::milliseconds limit);

 private:
  void serve();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  size_t idle_ = 0;  // threads waiting for a task
  std::condition_variable ended_;
  size_t completions_ = 0;  // posted and not ended
  std::atomic<bool> exiting_{false};
};

// Note [Releasing a Work off the transport's threads]
// A Work's last reference may hold tensors Python owns (its outputs, its future's value):
// dropping it takes the GIL. A transport's thread (Gloo's, the shared-memory communication
// thread) must never wait for the GIL: the thread holding it may be waiting for a collective
// behind the one this thread just finished (a host wait that keeps the GIL, as a generator's
// drain does: PowerSGD's hook calls torch.manual_seed, which waits for the device's streams,
// the communication stream included), and the transport would then never run it; both would
// wait until the group's timeout. Those threads hand their references to the releaser thread,
// which drops them: a collective's tensors the caller dropped may count in memory_allocated()
// for a moment after it ended.
// The releaser takes the GIL before it drops anything: once Python is finalizing, taking the
// GIL ends the calling thread (pthread_exit), which unwinding through a destructor turns into
// std::terminate; taken first, the thread just ends, and what it still held is left to the
// process's exit. One thread per process drops them, in order, so a long GIL hold blocks one
// thread, not one per finished collective; nothing waits for a release, so one blocked on the
// GIL holds up only the releases behind it.

// Runs `release` with the GIL held: at once on a thread that holds it, else on the releaser
// thread; never once Python is finalizing or after Python's atexit drained the releaser (what
// `release` would drop is left to the exit).
void release_with_gil(std::function<void()> release);

// Drops `held` (moved from) on the releaser thread (Note [Releasing a Work off the transport's threads]).
template <typename... Held>
void release_off_transport(Held&&... held) {
  auto* kept = new std::tuple<std::decay_t<Held>...>(std::move(held)...);
  release_with_gil([kept] { delete kept; });
}

// Python's atexit (before finalizing; without the GIL): the running completions end (Note
// [Completions at exit]) and the pending releases, later ones are left to the exit (Note
// [Releasing a Work off the transport's threads]). Waits up to 10 s for each.
void quiesce_collectives_for_exit();

}  // namespace torch_neuron
