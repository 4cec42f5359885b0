// LD_PRELOAD interposer for form_caches_none_after_transient_flag.py: ATen's bfloat16 brgemm, with oneDNN switched off during
// the one call that is SmallMatmul.cpp's once-per-process trial (kernel_runs_here: 16x16x2,
// lda 2), and back on right after, as when another thread is inside
// torch.backends.mkldnn.flags(enabled=False) at that moment. Every other call is passed through.
#include <dlfcn.h>
#include <cstdint>
#include <cstdlib>
namespace c10 { struct BFloat16; }
namespace at::native::cpublas {
void brgemm(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add_C,
            const c10::BFloat16* A, const c10::BFloat16* B, float* C, bool is_vnni);
}
using brgemm_fn = void (*)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, const c10::BFloat16*,
                           const c10::BFloat16*, float*, bool);
using global_fn = void* (*)();
using set_fn = void (*)(void*, bool);
static void* torch_cpu() {
  static void* lib = dlopen(std::getenv("LIBTORCH_CPU"), RTLD_NOW | RTLD_NOLOAD);
  return lib;
}
static int trials_hit = 0;
extern "C" int trials_interrupted() { return trials_hit; }
void at::native::cpublas::brgemm(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool add_C,
                                 const c10::BFloat16* A, const c10::BFloat16* B, float* C, bool is_vnni) {
  static auto real = reinterpret_cast<brgemm_fn>(dlsym(torch_cpu(), "_ZN2at6native7cpublas6brgemmEllllllbPKN3c108BFloat16ES5_Pfb"));
  static auto global = reinterpret_cast<global_fn>(dlsym(torch_cpu(), "_ZN2at13globalContextEv"));
  static auto set = reinterpret_cast<set_fn>(dlsym(torch_cpu(), "_ZN2at7Context20setUserEnabledMkldnnEb"));
  const bool trial = M == 16 && N == 16 && K == 2 && lda == 2 && trials_hit == 0;
  if (!trial) return real(M, N, K, lda, ldb, ldc, add_C, A, B, C, is_vnni);
  ++trials_hit;
  set(global(), false);  // another thread: oneDNN off ...
  try {
    real(M, N, K, lda, ldb, ldc, add_C, A, B, C, is_vnni);
  } catch (...) {
    set(global(), true);  // ... and on again
    throw;
  }
  set(global(), true);
}
