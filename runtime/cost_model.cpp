#include "cost_model.h"

#include <algorithm>
#include <cmath>

#include "error.h"

namespace neuron_rt {

const char* work_kind_name(WorkKind kind) {
  switch (kind) {
    case WorkKind::kNone: return "none";
    case WorkKind::kMatmul: return "matmul";
    case WorkKind::kPointwise: return "pointwise";
    case WorkKind::kTranscendental: return "transcendental";
    case WorkKind::kReduction: return "reduction";
    case WorkKind::kSoftmax: return "softmax";
    case WorkKind::kNorm: return "norm";
    case WorkKind::kDataMovement: return "data movement";
    case WorkKind::kDeviceCopy: return "device copy";
    case WorkKind::kHostToDevice: return "host to device";
    case WorkKind::kDeviceToHost: return "device to host";
  }
  return "?";
}

CostModel::CostModel(const PlatformSpec& spec, int logical_nc_config)
    : platform_(spec.platform()), lnc_(logical_nc_config) {
  if (lnc_ < 1) throw Error(ErrorCode::kInvalidArgument, "the cost model needs LNC >= 1");
  const double cores_per_chip = spec.get("physical_cores_per_chip");
  // TFLOPS = 1e12 FLOP/s = 1e3 FLOP/ns; GB/s = 1 byte/ns; GHz x lanes = elements/ns.
  tensor_bf16_flops_per_ns_ = spec.get("tensor_bf16_tflops") * 1e3 * lnc_;
  tensor_fp8_flops_per_ns_ = spec.get("tensor_fp8_tflops") * 1e3 * lnc_;
  tensor_fp32_flops_per_ns_ = spec.get("tensor_fp32_tflops") * 1e3 * lnc_;
  tensor_utilization_ = spec.get("tensor_utilization");
  array_rows_ = int64_t(spec.get("systolic_array_rows"));
  array_columns_ = int64_t(spec.get("systolic_array_columns"));
  vector_bf16_per_ns_ = spec.get("vector_lanes_bf16") * spec.get("vector_clock_ghz") * lnc_;
  vector_other_per_ns_ = spec.get("vector_lanes_other") * spec.get("vector_clock_ghz") * lnc_;
  scalar_bf16_per_ns_ = spec.get("scalar_lanes_bf16") * spec.get("scalar_clock_ghz") * lnc_;
  scalar_other_per_ns_ = spec.get("scalar_lanes_other") * spec.get("scalar_clock_ghz") * lnc_;
  hbm_bytes_per_ns_ = spec.get("hbm_chip_gbps") / cores_per_chip * lnc_;
  dma_bytes_per_ns_ = spec.get("dma_chip_gbps") / cores_per_chip * lnc_;
  host_link_bytes_per_ns_ = spec.get("host_link_gbps");
  eager_launch_ns_ = spec.get("eager_launch_ns");
  program_launch_ns_ = spec.get("program_launch_ns");
  neuronlink_bytes_per_ns_ = spec.get("neuronlink_chip_gbps");
  neuronlink_latency_ns_ = spec.get("neuronlink_latency_ns");
  efa_bytes_per_ns_ = spec.get("efa_chip_gbps");
  efa_latency_ns_ = spec.get("efa_latency_ns");
  if (!(tensor_utilization_ > 0.0 && tensor_utilization_ <= 1.0)) {
    throw Error(ErrorCode::kInvalidArgument, "tensor_utilization of " + platform_ + " must be in (0, 1]");
  }
  if (array_rows_ < 1 || array_columns_ < 1) {
    throw Error(ErrorCode::kInvalidArgument, "the systolic array of " + platform_ + " must have rows and columns");
  }
}

double CostModel::tensor_flops_per_ns(NumberFormat format) const {
  switch (format) {
    case NumberFormat::kFP8: return tensor_fp8_flops_per_ns_;
    case NumberFormat::kBF16: return tensor_bf16_flops_per_ns_;
    default: return tensor_fp32_flops_per_ns_;  // FP32, and integers (no integer TensorE rate is published)
  }
}

double CostModel::vector_elements_per_ns(NumberFormat format) const {
  return format == NumberFormat::kBF16 || format == NumberFormat::kFP8 ? vector_bf16_per_ns_ : vector_other_per_ns_;
}

double CostModel::scalar_elements_per_ns(NumberFormat format) const {
  return format == NumberFormat::kBF16 || format == NumberFormat::kFP8 ? scalar_bf16_per_ns_ : scalar_other_per_ns_;
}

namespace {
int64_t round_up(int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }
}  // namespace

WorkCost CostModel::cost(const Work& work) const {
  WorkCost cost;
  cost.fixed_ns = work.eager_launch ? eager_launch_ns_ : 0.0;
  cost.hbm_bytes = double(work.hbm_bytes_read) + double(work.hbm_bytes_written);
  cost.memory_ns = cost.hbm_bytes / hbm_bytes_per_ns_;
  const double elements = double(work.elements);
  switch (work.kind) {
    case WorkKind::kNone:
      break;
    case WorkKind::kMatmul: {
      const MatmulShape& s = work.matmul;
      if (s.m > 0 && s.k > 0 && s.n > 0) {
        const double flops = 2.0 * double(std::max<int64_t>(s.batch, 1)) * double(s.m) *
                             double(round_up(s.k, array_rows_)) * double(round_up(s.n, array_columns_));
        cost.compute_ns = flops / (tensor_flops_per_ns(work.format) * tensor_utilization_);
        cost.flops = 2.0 * double(std::max<int64_t>(s.batch, 1)) * double(s.m) * double(s.k) * double(s.n);
      }
      break;
    }
    case WorkKind::kPointwise:
    case WorkKind::kReduction:
      cost.compute_ns = elements / vector_elements_per_ns(work.format);
      break;
    case WorkKind::kTranscendental:
      cost.compute_ns = elements / scalar_elements_per_ns(work.format);
      break;
    case WorkKind::kSoftmax:
    case WorkKind::kNorm:
      cost.compute_ns = 2.0 * elements / vector_elements_per_ns(work.format) +
                        elements / scalar_elements_per_ns(work.format);
      break;
    case WorkKind::kDataMovement:
    case WorkKind::kDeviceCopy:
      cost.compute_ns = double(work.moved_bytes) / dma_bytes_per_ns_;
      break;
    case WorkKind::kHostToDevice:
    case WorkKind::kDeviceToHost:
      cost.compute_ns = double(work.moved_bytes) / host_link_bytes_per_ns_;
      break;
  }
  cost.ns = uint64_t(std::llround(cost.fixed_ns + std::max(cost.compute_ns, cost.memory_ns)));
  return cost;
}

WorkCost CostModel::cost(const CollectiveWork& work) const {
  WorkCost cost;
  if (work.ranks < 2) return cost;
  const double n = work.ranks, bytes = double(work.bytes);
  const bool efa = work.link == CollectiveLink::kEFA;
  const double bandwidth = efa ? efa_bytes_per_ns_ : neuronlink_bytes_per_ns_;
  const double latency = efa ? efa_latency_ns_ : neuronlink_latency_ns_;
  // Hops of a ring over every rank, or within each chip and then over the chips.
  const double on_chip = std::min<double>(std::max(work.ranks_per_chip, 1), n);
  const double hops = (on_chip - 1) + (std::ceil(n / on_chip) - 1);
  double share = 1, steps = 1;  // the fraction of the bytes each rank sends; the latency steps
  switch (work.algorithm) {
    case CollectiveAlgorithm::kRingAllReduce: share = 2 * (n - 1) / n; steps = 2 * hops; break;
    case CollectiveAlgorithm::kRingAllGather:
    case CollectiveAlgorithm::kRingReduceScatter: share = (n - 1) / n; steps = hops; break;
    case CollectiveAlgorithm::kBroadcast: share = 1; steps = hops; break;
    case CollectiveAlgorithm::kPointToPoint: share = 1; steps = 1; break;
  }
  cost.fixed_ns = steps * latency;
  cost.compute_ns = share * bytes / bandwidth;
  cost.ns = uint64_t(std::llround(cost.fixed_ns + cost.compute_ns));
  return cost;
}

}  // namespace neuron_rt
