// A pause for spin-wait loops (the stream worker's idle spin, the shared-memory steps).
#pragma once

namespace neuron_rt {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace neuron_rt
