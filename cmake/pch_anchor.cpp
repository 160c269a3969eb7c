// Anchor translation unit for a shared LibTorch precompiled header (cmake/torch_pch.h, cmake/torch_nn_pch.h).
