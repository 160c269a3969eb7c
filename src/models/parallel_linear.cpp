#include "lockstep/models/parallel_linear.h"

#include <utility>

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>

#include "lockstep/comm/process_group.h"

namespace lockstep::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels to backward through ctx->saved_data as a capsule (saved_data holds IValues only);
// the layers' contract (the group outlives them) covers every backward of a graph they built.
struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(comm::ProcessGroup* g) : group(g) {}
  comm::ProcessGroup* group;
};

void save_group(AutogradContext* ctx, comm::ProcessGroup& group) {
  ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(&group));
}

comm::ProcessGroup& saved_group(AutogradContext* ctx) {
  auto capsule = ctx->saved_data["group"].toCapsule();
  return *c10::static_intrusive_pointer_cast<GroupCapsule>(capsule)->group;
}

at::Tensor all_reduced(const at::Tensor& x, comm::ProcessGroup& group) {
  auto sum = x.clone(at::MemoryFormat::Contiguous);
  group.all_reduce(sum, comm::ReduceOp::kSum).wait();
  return sum;
}

// [..., n] on each rank → [..., T·n], rank r's at [r·n, (r+1)·n).
at::Tensor all_gathered_last_dim(const at::Tensor& x, comm::ProcessGroup& group) {
  auto stacked = group.all_gather_stacked(x.contiguous());  // [T, ..., n]
  return at::cat(stacked.unbind(0), /*dim=*/-1);
}

at::Tensor rank_slice_last_dim(const at::Tensor& x, comm::ProcessGroup& group, const char* what) {
  TORCH_CHECK(x.dim() >= 1, what, ": expected a tensor of at least 1 dimension, got a 0-d one");
  const int64_t full = x.size(-1);
  TORCH_CHECK(full % group.size() == 0, what, ": the last dimension (", full,
              ") must be divisible by the tensor-parallel group's size (", group.size(), ")");
  const int64_t n = full / group.size();
  return x.narrow(-1, group.rank() * n, n).contiguous();
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, comm::ProcessGroup* group) {
    save_group(ctx, *group);
    return x;  // returned unchanged: autograd makes it a view with this node as its grad_fn
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, comm::ProcessGroup* group) {
    return all_reduced(x, *group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherFromRegion : torch::autograd::Function<GatherFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, comm::ProcessGroup* group) {
    TORCH_CHECK(
        x.dim() >= 1,
        "gather_from_tensor_parallel_region: expected a tensor of at least 1 dimension, got a 0-d one");
    save_group(ctx, *group);
    return all_gathered_last_dim(x, *group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {rank_slice_last_dim(grads[0], saved_group(ctx), "gather_from_tensor_parallel_region backward"),
            at::Tensor()};
  }
};

struct ScatterToRegion : torch::autograd::Function<ScatterToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, comm::ProcessGroup* group) {
    save_group(ctx, *group);
    return rank_slice_last_dim(x, *group, "scatter_to_tensor_parallel_region");
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gathered_last_dim(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

// The full layer exactly as torch::nn::Linear(in, out) initialises it (the same draws from the default
// generator, in the default dtype), so that the split does not change what a seed gives.
torch::nn::Linear full_linear(int64_t in_features, int64_t out_features, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in_features, out_features).bias(bias));
}

void check_sizes(const char* options, int64_t in_features, int64_t out_features) {
  TORCH_CHECK(in_features > 0, options, "::in_features must be > 0, got ", in_features);
  TORCH_CHECK(out_features > 0, options, "::out_features must be > 0, got ", out_features);
}

void check_full_shape(const char* layer, const at::Tensor& weight, const at::Tensor& bias,
                      int64_t in_features, int64_t out_features, bool has_bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == out_features && weight.size(1) == in_features, layer,
              "::load_full: expected a full weight of [", out_features, ", ", in_features, "], got ",
              weight.sizes());
  TORCH_CHECK(bias.defined() == has_bias, layer, "::load_full: the layer has ", has_bias ? "a" : "no",
              " bias but the bias given is ", bias.defined() ? "defined" : "undefined");
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features), layer,
              "::load_full: expected a full bias of [", out_features, "], got ", bias.sizes());
}

}  // namespace

at::Tensor copy_to_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group) {
  if (group.size() == 1) return x;
  return CopyToRegion::apply(x, &group);
}

at::Tensor reduce_from_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group) {
  if (group.size() == 1) return x;
  return ReduceFromRegion::apply(x, &group);
}

at::Tensor gather_from_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group) {
  if (group.size() == 1) return x;
  return GatherFromRegion::apply(x, &group);
}

at::Tensor scatter_to_tensor_parallel_region(const at::Tensor& x, comm::ProcessGroup& group) {
  if (group.size() == 1) return x;
  return ScatterToRegion::apply(x, &group);
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(ColumnParallelLinearOptions options,
                                                   comm::ProcessGroup& group)
    : options_(std::move(options)), group_(group), rank_(group.rank()), world_(group.size()) {
  check_sizes("ColumnParallelLinearOptions", options_.in_features(), options_.out_features());
  TORCH_CHECK(options_.out_features() % world_ == 0, "ColumnParallelLinearOptions::out_features (",
              options_.out_features(), ") must be divisible by the tensor-parallel group's size (", world_,
              ")");
  const int64_t rows = options_.out_features() / world_;
  auto full = full_linear(options_.in_features(), options_.out_features(), options_.bias());
  weight = register_parameter("weight", full->weight.detach().narrow(0, first_row(), rows).clone());
  if (options_.bias()) {
    bias = register_parameter("bias", full->bias.detach().narrow(0, first_row(), rows).clone());
  }
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == options_.in_features(),
              "ColumnParallelLinear::forward: expected [..., ", options_.in_features(),
              "] (ColumnParallelLinearOptions::in_features), got ", x.sizes());
  auto y = at::linear(copy_to_tensor_parallel_region(x, group_), weight, bias);
  return options_.gather_output() ? gather_from_tensor_parallel_region(y, group_) : y;
}

void ColumnParallelLinearImpl::load_full(const at::Tensor& full_weight, const at::Tensor& full_bias) {
  check_full_shape("ColumnParallelLinear", full_weight, full_bias, options_.in_features(),
                   options_.out_features(), options_.bias());
  const int64_t rows = weight.size(0);
  torch::NoGradGuard no_grad;
  weight.copy_(full_weight.narrow(0, first_row(), rows));
  if (bias.defined()) bias.copy_(full_bias.narrow(0, first_row(), rows));
}

RowParallelLinearImpl::RowParallelLinearImpl(RowParallelLinearOptions options, comm::ProcessGroup& group)
    : options_(std::move(options)), group_(group), rank_(group.rank()), world_(group.size()) {
  check_sizes("RowParallelLinearOptions", options_.in_features(), options_.out_features());
  TORCH_CHECK(options_.in_features() % world_ == 0, "RowParallelLinearOptions::in_features (",
              options_.in_features(), ") must be divisible by the tensor-parallel group's size (", world_,
              ")");
  const int64_t columns = options_.in_features() / world_;
  auto full = full_linear(options_.in_features(), options_.out_features(), options_.bias());
  weight = register_parameter("weight", full->weight.detach().narrow(1, first_column(), columns).clone());
  if (options_.bias()) bias = register_parameter("bias", full->bias.detach().clone());
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const int64_t expected = options_.input_is_parallel() ? weight.size(1) : options_.in_features();
  TORCH_CHECK(
      x.dim() >= 1 && x.size(-1) == expected, "RowParallelLinear::forward: expected [..., ", expected, "] (",
      options_.input_is_parallel() ? "RowParallelLinearOptions::in_features / the group's size, since "
                                     "input_is_parallel"
                                   : "RowParallelLinearOptions::in_features",
      "), got ", x.sizes());
  auto local = options_.input_is_parallel() ? x : scatter_to_tensor_parallel_region(x, group_);
  auto y = reduce_from_tensor_parallel_region(at::linear(local, weight), group_);
  return bias.defined() ? y + bias : y;
}

void RowParallelLinearImpl::load_full(const at::Tensor& full_weight, const at::Tensor& full_bias) {
  check_full_shape("RowParallelLinear", full_weight, full_bias, options_.in_features(),
                   options_.out_features(), options_.bias());
  torch::NoGradGuard no_grad;
  weight.copy_(full_weight.narrow(1, first_column(), weight.size(1)));
  if (bias.defined()) bias.copy_(full_bias);
}

}  // namespace lockstep::models
