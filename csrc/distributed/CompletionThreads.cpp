// The completion threads and the releaser: Notes in CompletionThreads.h.
#include "CompletionThreads.h"

#include <torch/csrc/python_headers.h>

#include <cxxabi.h>
#include <unistd.h>

#include <thread>

namespace torch_neuron {
namespace {

// One T per process, made at first use; a forked child makes its own (its parent's threads
// are not in it). Never freed: detached threads may still use it at exit.
template <typename T>
T& per_process() {
  static std::mutex made;
  static T* instance = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(made);
  if (!instance || owner != getpid()) {
    instance = new T();
    owner = getpid();
  }
  return *instance;
}

// The releaser thread (Note [Releasing a Work off the transport's threads]): runs the posted
// releases one at a time, in order, on one thread started at the first post.
class Releaser {
 public:
  static Releaser& get() { return per_process<Releaser>(); }

  void post(std::function<void()> release) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;  // after drain_for_exit(): left to the exit
    queue_.push_back(std::move(release));
    if (!started_) {
      started_ = true;
      std::thread([this] { serve(); }).detach();
    }
    ready_.notify_one();
  }

  // Python's atexit, before the interpreter starts finalizing (called without the GIL): the
  // queued releases run (they take the GIL), and later ones are left to the exit. Dropping a
  // tensor may release and retake the GIL inside its destructors (THPVariable's dealloc), and
  // retaking it once Python finalizes ends the thread there, std::terminate, even with the
  // GIL taken first: no release may start after this.
  void drain_for_exit(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait_for(lock, limit, [&] { return queue_.empty() && !running_; });
    closed_ = true;
  }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] { return !queue_.empty(); });
      std::function<void()> release = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lock.unlock();
      release();
      release = nullptr;
      lock.lock();
      running_ = false;
      if (queue_.empty()) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool started_ = false;
  bool running_ = false;
  bool closed_ = false;
};

}  // namespace

CompletionThreads& CompletionThreads::get() { return per_process<CompletionThreads>(); }

void CompletionThreads::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  if (tasks_.size() > idle_) {
    std::thread([this] { serve(); }).detach();
  } else {
    ready_.notify_one();
  }
}

void CompletionThreads::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    const bool has_task = ready_.wait_for(lock, std::chrono::seconds(60), [&] { return !tasks_.empty(); });
    --idle_;
    if (!has_task) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (abi::__forced_unwind&) {
      throw;  // the thread ends: it took the GIL once Python finalized (pthread_exit)
    } catch (...) {
      // tasks report their errors through their Work's future
    }
    task = nullptr;  // what it held goes outside the lock
    lock.lock();
  }
}

void CompletionThreads::post_completion(std::function<void()> completion) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++completions_;
  }
  post([this, completion = std::move(completion)]() mutable {
    struct Ended {
      CompletionThreads& threads;
      std::function<void()>& completion;
      ~Ended() {
        completion = nullptr;  // what it holds goes before it counts as ended
        std::lock_guard<std::mutex> lock(threads.mutex_);
        if (--threads.completions_ == 0) threads.ended_.notify_all();
      }
    } ended{*this, completion};
    completion();
  });
}

bool CompletionThreads::may_run() { return Py_IsInitialized() && !_Py_IsFinalizing(); }

void CompletionThreads::wait_for_exit(std::chrono::milliseconds limit) {
  exiting_.store(true);
  std::unique_lock<std::mutex> lock(mutex_);
  ended_.wait_for(lock, limit, [&] { return completions_ == 0; });
}

void release_with_gil(std::function<void()> release) {
  // A collective run on a thread that holds the GIL (a synchronous caller's, a waiter's: Note
  // [Waiters run their collectives]) drops its references at once: nothing waits for the GIL.
  if (Py_IsInitialized() && !_Py_IsFinalizing() && PyGILState_Check()) {
    release();
    return;
  }
  Releaser::get().post([release = std::move(release)] {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;  // left to the exit
    // The GIL is taken here, not inside the destructors `release` runs: Python may begin
    // finalizing after the check above, and taking the GIL then ends this thread
    // (pthread_exit), which here just ends it, while unwinding through a (noexcept)
    // destructor would be std::terminate. With the GIL held, the destructors' own
    // acquisitions do not wait.
    const PyGILState_STATE gil = PyGILState_Ensure();
    release();
    PyGILState_Release(gil);
  });
}

void quiesce_collectives_for_exit() {
  CompletionThreads::get().wait_for_exit(std::chrono::seconds(10));
  Releaser::get().drain_for_exit(std::chrono::seconds(10));
}

}  // namespace torch_neuron
