// Note [Device clock]
// The simulated device keeps a second time beside the host's: a prediction of how long the
// work would take on a Trainium (NEURON_SIM_PLATFORM: trn1, trn2, trn3; LNC as in
// topology.h). Two parts, both torch-free:
//  - the cost model (this file): a unit of work described by what the device sees (its kind,
//    number format, HBM bytes read and written, elements, matmul dimensions, host-link bytes)
//    gets a predicted duration in nanoseconds:
//        duration = fixed + max(compute, memory)                         (a roofline per launch)
//        fixed    = eager_launch_ns for an eager launch (one per op), 0 otherwise
//        memory   = HBM bytes / (hbm_chip_gbps / physical_cores_per_chip * LNC)
//        compute  = by kind:
//          matmul        2 * batch * m * pad(k) * pad(n) / (tensor_<format>_tflops * LNC * tensor_utilization);
//                        pad() rounds up to the systolic array's rows (k, the contraction on the
//                        partitions) and columns (n, the stationary operand's free size): the
//                        tile efficiency; m streams through and is not padded; tensor_utilization
//                        is the share of the peak a matmul achieves beyond that (fitted, labelled
//                        in platforms.toml: Note [Prefill as a serving stack's kernel runs it]
//                        in dry_run.py). Attention's matmuls are matmuls here too
//          pointwise     elements / (vector_lanes_<format> * vector_clock_ghz * LNC)    (VectorE)
//          transcendental elements / (scalar_lanes_<format> * scalar_clock_ghz * LNC)   (ScalarE: exp, tanh, ...)
//          reduction     one VectorE pass over the input elements
//          softmax, norm two VectorE passes and one ScalarE pass over the input (max / statistics,
//                        the exp or normalisation with its scale and bias on ScalarE, the final
//                        scale on VectorE)
//          data movement, device copy   bytes moved / (dma_chip_gbps / physical_cores_per_chip * LNC)
//          host transfer host bytes / host_link_gbps (the chip's link, whole)
//  - a compiled program (one launch): program_launch_ns + the sum of its steps' costs, each a
//    Work with eager_launch = false (a fused pointwise group is one pass over its operands)
//  - a collective (CollectiveWork): an alpha-beta model per algorithm over n ranks, with the
//    link's bandwidth B (per rank) and latency a: NeuronLink within an instance, EFA across:
//          ring allreduce              2(n-1)/n * bytes / B + 2(n-1) * a
//          ring allgather, reduce-scatter   (n-1)/n * bytes / B +  (n-1) * a   (bytes: the whole buffer)
//          broadcast (pipelined chain)        bytes / B +  (n-1) * a
//          send / recv                        bytes / B +        a
//    the latency part is its fixed_ns, the bandwidth part its compute_ns; one rank costs nothing.
//    Ranks that share a chip (ranks_per_chip r > 1, n = r * c over c chips) are combined
//    hierarchically, within each chip then across the chips: the latency steps become
//    2(r-1) + 2(c-1) for an allreduce ((r-1) + (c-1) for allgather, reduce-scatter, broadcast)
//    instead of 2(n-1); the bytes term is the ring's. A live collective has r = 1 (a process
//    per rank, its chip unknown); the dry run gives r = physical cores per chip / LNC.
//  - the timeline (timeline.h): each stream appends its launches' durations in issue order;
//    events carry the time of their stream at record and a wait moves the waiting stream's
//    time up to it.
// Every constant is read from the platform data file with its source (platform_spec.h); the
// formulas above are structure, not calibration. docs/device-clock.md lists the constants and
// what is not modelled (SBUF capacity and spills, the overlap of host dispatch with device
// work, engine overlap inside one launch, stationary-weight load cycles of small matmuls).
//
// Thread safety: a CostModel is immutable after construction; cost() may run on any thread.
#pragma once

#include <cstdint>
#include <string>

#include "platform_spec.h"

namespace neuron_rt {

// What the engines compute with. FP16 and TF32 run at the BF16 rate on TensorE.
enum class NumberFormat : uint8_t { kFP8, kBF16, kFP32, kOther };

// The kind of work: which engine does it, and how its compute time is counted.
enum class WorkKind : uint8_t {
  kNone,            // no compute: bookkeeping launches (fixed cost only, plus its memory traffic)
  kMatmul,          // TensorE
  kPointwise,       // VectorE, one pass over the output
  kTranscendental,  // ScalarE, one pass over the output (exp, tanh, sigmoid, gelu, silu, ...)
  kReduction,       // VectorE, one pass over the input
  kSoftmax,         // VectorE x2 + ScalarE x1 over the input
  kNorm,            // VectorE x2 + ScalarE x1 over the input
  kDataMovement,    // DMA within HBM: gather, cat, index, layout changes
  kDeviceCopy,      // DMA within HBM: copy_ between device tensors
  kHostToDevice,    // DMA over the host link, then HBM writes
  kDeviceToHost,    // HBM reads, then DMA over the host link
};
const char* work_kind_name(WorkKind kind);

struct MatmulShape {
  int64_t batch = 1, m = 0, k = 0, n = 0;
};

// One launch's work, as the device sees it.
struct Work {
  WorkKind kind = WorkKind::kNone;
  NumberFormat format = NumberFormat::kFP32;
  uint64_t hbm_bytes_read = 0;
  uint64_t hbm_bytes_written = 0;
  uint64_t elements = 0;     // elements the engine processes (see WorkKind)
  uint64_t moved_bytes = 0;  // bytes a DMA moves (data movement, copies, host transfers)
  MatmulShape matmul;        // kMatmul only
  bool eager_launch = true;  // pays the eager per-launch cost (a compiled program's ops do not)
};

// How a collective moves its data (Note [Device clock]).
enum class CollectiveAlgorithm : uint8_t { kRingAllReduce, kRingAllGather, kRingReduceScatter, kBroadcast, kPointToPoint };
// The link between the ranks: NeuronLink within an instance, EFA across instances.
enum class CollectiveLink : uint8_t { kNeuronLink, kEFA };

// One collective, as the device sees it.
struct CollectiveWork {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRingAllReduce;
  uint64_t bytes = 0;  // the whole buffer: allreduce's tensor, allgather's output, reduce-scatter's input
  int ranks = 1;
  CollectiveLink link = CollectiveLink::kNeuronLink;
  int ranks_per_chip = 1;  // > 1: hierarchical latency steps (Note [Device clock])
};

// A prediction, in nanoseconds, with its parts (for the profiler's track and reports).
struct WorkCost {
  uint64_t ns = 0;          // fixed + max(compute, memory), rounded to the nearest ns
  double fixed_ns = 0;
  double compute_ns = 0;
  double memory_ns = 0;
  // The work done, for MFU and MBU: a matmul's useful FLOPs (2·batch·m·k·n, without the
  // tile padding the time pays for) and the HBM bytes read and written.
  double flops = 0;
  double hbm_bytes = 0;
};

class CostModel {
 public:
  // Reads every constant it uses from `spec`; throws Error(kInvalidArgument) naming a
  // missing one. `logical_nc_config`: physical cores per logical core (1 or 2).
  CostModel(const PlatformSpec& spec, int logical_nc_config);

  WorkCost cost(const Work& work) const;
  WorkCost cost(const CollectiveWork& work) const;
  // The fixed cost of launching one compiled program (its steps add their own costs).
  double program_launch_ns() const { return program_launch_ns_; }

  const std::string& platform() const { return platform_; }
  int logical_nc_config() const { return lnc_; }
  // Peak rates of one logical core (MFU/MBU denominators).
  double tensor_flops_per_ns(NumberFormat format) const;
  double hbm_bytes_per_ns() const { return hbm_bytes_per_ns_; }

 private:
  double vector_elements_per_ns(NumberFormat format) const;
  double scalar_elements_per_ns(NumberFormat format) const;

  std::string platform_;
  int lnc_;
  double tensor_bf16_flops_per_ns_, tensor_fp8_flops_per_ns_, tensor_fp32_flops_per_ns_;
  double tensor_utilization_;  // the share of the peak rate a matmul achieves (platforms.toml, fitted)
  int64_t array_rows_, array_columns_;
  double vector_bf16_per_ns_, vector_other_per_ns_;
  double scalar_bf16_per_ns_, scalar_other_per_ns_;
  double hbm_bytes_per_ns_, dma_bytes_per_ns_, host_link_bytes_per_ns_;
  double eager_launch_ns_, program_launch_ns_;
  double neuronlink_bytes_per_ns_, neuronlink_latency_ns_, efa_bytes_per_ns_, efa_latency_ns_;
};

}  // namespace neuron_rt
