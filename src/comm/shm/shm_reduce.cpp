#include "shm_reduce.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace lockstep::comm::detail {
namespace {

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Product {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};

// Native types: pairwise passes over the inputs, each a simple loop the compiler vectorises.
template <typename T, typename Op>
void reduce_native(void* out_raw, const void* const* in, int n, std::int64_t count) {
  T* out = static_cast<T*>(out_raw);
  const T* a = static_cast<const T*>(in[0]);
  if (n == 1) {
    if (out != a) std::memcpy(out, a, count * sizeof(T));
    return;
  }
  const Op op;
  const T* b = static_cast<const T*>(in[1]);
  for (std::int64_t i = 0; i < count; ++i) out[i] = op(a[i], b[i]);
  for (int j = 2; j < n; ++j) {
    const T* c = static_cast<const T*>(in[j]);
    for (std::int64_t i = 0; i < count; ++i) out[i] = op(out[i], c[i]);
  }
}

// 16-bit floats: accumulate each element over all inputs in float32, round once.
template <typename T, typename Op>
void reduce_half(void* out_raw, const void* const* in, int n, std::int64_t count) {
  T* out = static_cast<T*>(out_raw);
  const Op op;
  constexpr std::int64_t kBlock = 256;
  float acc[kBlock];
  for (std::int64_t start = 0; start < count; start += kBlock) {
    const std::int64_t len = std::min(kBlock, count - start);
    const T* a = static_cast<const T*>(in[0]) + start;
    for (std::int64_t i = 0; i < len; ++i) acc[i] = static_cast<float>(a[i]);
    for (int j = 1; j < n; ++j) {
      const T* c = static_cast<const T*>(in[j]) + start;
      for (std::int64_t i = 0; i < len; ++i) acc[i] = op(acc[i], static_cast<float>(c[i]));
    }
    for (std::int64_t i = 0; i < len; ++i) out[start + i] = static_cast<T>(acc[i]);
  }
}

template <typename Op>
void reduce_typed(c10::ScalarType type, void* out, const void* const* in, int n, std::int64_t count) {
  switch (type) {
    case c10::ScalarType::Float:
      return reduce_native<float, Op>(out, in, n, count);
    case c10::ScalarType::Double:
      return reduce_native<double, Op>(out, in, n, count);
    case c10::ScalarType::Int:
      return reduce_native<std::int32_t, Op>(out, in, n, count);
    case c10::ScalarType::Long:
      return reduce_native<std::int64_t, Op>(out, in, n, count);
    case c10::ScalarType::Byte:
      return reduce_native<std::uint8_t, Op>(out, in, n, count);
    case c10::ScalarType::Char:
      return reduce_native<std::int8_t, Op>(out, in, n, count);
    case c10::ScalarType::Half:
      return reduce_half<c10::Half, Op>(out, in, n, count);
    case c10::ScalarType::BFloat16:
      return reduce_half<c10::BFloat16, Op>(out, in, n, count);
    default:
      throw std::invalid_argument(std::string("the shm backend cannot reduce ") + c10::toString(type) +
                                  " tensors (it reduces float32, float64, bfloat16, float16, int32, int64, "
                                  "uint8, int8)");
  }
}

template <typename T>
void divide_floating(void* data, std::int64_t count, int divisor) {
  T* p = static_cast<T*>(data);
  for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<float>(p[i]) / divisor);
}

template <typename T>
void divide_native(void* data, std::int64_t count, int divisor) {
  T* p = static_cast<T*>(data);
  const T d = static_cast<T>(divisor);
  for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / d);
}

}  // namespace

bool shm_reducible(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
      return true;
    default:
      return false;
  }
}

void shm_reduce(c10::ScalarType type, ShmReduceOp op, void* out, const void* const* in, int n,
                std::int64_t count) {
  if (count <= 0) return;
  switch (op) {
    case ShmReduceOp::kSum:
      return reduce_typed<Sum>(type, out, in, n, count);
    case ShmReduceOp::kProduct:
      return reduce_typed<Product>(type, out, in, n, count);
    case ShmReduceOp::kMin:
      return reduce_typed<Min>(type, out, in, n, count);
    case ShmReduceOp::kMax:
      return reduce_typed<Max>(type, out, in, n, count);
  }
}

void shm_divide(c10::ScalarType type, void* data, std::int64_t count, int divisor) {
  switch (type) {
    case c10::ScalarType::Float:
      return divide_native<float>(data, count, divisor);
    case c10::ScalarType::Double:
      return divide_native<double>(data, count, divisor);
    case c10::ScalarType::Int:
      return divide_native<std::int32_t>(data, count, divisor);
    case c10::ScalarType::Long:
      return divide_native<std::int64_t>(data, count, divisor);
    case c10::ScalarType::Byte:
      return divide_native<std::uint8_t>(data, count, divisor);
    case c10::ScalarType::Char:
      return divide_native<std::int8_t>(data, count, divisor);
    case c10::ScalarType::Half:
      return divide_floating<c10::Half>(data, count, divisor);
    case c10::ScalarType::BFloat16:
      return divide_floating<c10::BFloat16>(data, count, divisor);
    default:
      throw std::invalid_argument(std::string("the shm backend cannot average ") + c10::toString(type));
  }
}

}  // namespace lockstep::comm::detail
