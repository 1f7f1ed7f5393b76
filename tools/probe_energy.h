/* probe_energy.h: the GPU's energy counter for the measuring tools (tools/gemm_probe.cu, tools/l2_ring_probe.cu):
 * NVML's total energy in millijoules, opened at run time (libnvidia-ml.so.1 comes with the driver; nothing to
 * link). The counter moves in steps, so a measurement should span a few seconds of back-to-back work, after a
 * few seconds of warm-up: the 700 W power limit of an H100 takes hold over seconds, not per kernel. */
#ifndef QLT_PROBE_ENERGY_H
#define QLT_PROBE_ENERGY_H

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>

struct probe_energy {
    void *dev = nullptr;
    int (*read)(void *, unsigned long long *) = nullptr;
    /* false where NVML or the counter is missing */
    bool open() {
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) return false;
        auto init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
        auto by_index = (int (*)(unsigned, void **))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
        read = (int (*)(void *, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
        return init && by_index && read && init() == 0 && by_index(0, &dev) == 0;
    }
    /* joules since the driver loaded, or -1 */
    double joules() {
        unsigned long long mj = 0;
        return read(dev, &mj) == 0 ? mj / 1e3 : -1;
    }
    /* call() n times back to back from an idle device to an idle device: *seconds and *joules in all */
    template <typename F> void sustain(F call, int n, double *seconds, double *joules) {
        cudaDeviceSynchronize();
        const double j0 = this->joules();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) call();
        cudaDeviceSynchronize();
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        *joules = this->joules() - j0;
    }
};

#endif
