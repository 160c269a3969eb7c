// How lockstep's backends are put behind a c10d::ProcessGroup on each LibTorch
// (include/lockstep/comm/c10d_compat.h).
#include "lockstep/comm/c10d_compat.h"

namespace lockstep::comm::detail {

#if LOCKSTEP_C10D_HAS_BACKENDS

namespace {

// A 2.x front that names its backend: c10d's own front would call lockstep's backends "custom".
class Front final : public c10d::ProcessGroup {
 public:
  Front(const c10::intrusive_ptr<c10d::Store>& store, const c10::intrusive_ptr<c10d::Backend>& backend,
        const c10::intrusive_ptr<c10d::Backend>& host)
      : c10d::ProcessGroup(store, backend->getRank(), backend->getSize()), name_(backend->getBackendName()) {
    const BackendType type = type_of(name_);
    setDefaultBackend(type);
    if (type != NCCL) setBackend(c10::DeviceType::CPU, type, backend);
    if (type != CUSTOM) setBackend(c10::DeviceType::CUDA, type, backend);  // Gloo also moves CUDA tensors
    if (host) setBackend(c10::DeviceType::CPU, type_of(host->getBackendName()), host);
  }

  const std::string getBackendName() const override { return name_; }

 private:
  static BackendType type_of(const std::string& name) {
    return name == "gloo" ? GLOO : name == "nccl" ? NCCL : CUSTOM;
  }

  std::string name_;
};

}  // namespace

c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(const c10::intrusive_ptr<NativeBackend>& backend,
                                                        const c10::intrusive_ptr<c10d::Store>& store,
                                                        const c10::intrusive_ptr<NativeBackend>& host) {
  return c10::make_intrusive<Front>(store, backend, host);
}

c10::intrusive_ptr<NativeBackend> backend_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return group ? group->getDefaultBackend() : c10::intrusive_ptr<NativeBackend>();
}

#else

c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(const c10::intrusive_ptr<NativeBackend>& backend,
                                                        const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                                        const c10::intrusive_ptr<NativeBackend>& /*host*/) {
  return backend;  // 1.x: one backend per group (lockstep's ProcessGroup routes CPU tensors to `host`)
}

c10::intrusive_ptr<NativeBackend> backend_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return group;
}

#endif

bool gloo_can_reduce(at::ScalarType dtype) {
  return TORCH_VERSION_MAJOR >= 2 || dtype != at::kBFloat16;
}

}  // namespace lockstep::comm::detail
