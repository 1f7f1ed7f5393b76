/* clock_monitor.cu: what the GPU's clock and power did during `qlora-train bench`'s measured steps. A GPU
 * running qlora-train's steps can sit at its power limit and lower its SM clock, so tokens/s move with the
 * power cap and the GPU's temperature; the bench reports the median SM clock and the share of samples
 * throttled by the power cap next to its timings.
 *
 * NVML (libnvidia-ml.so.1, part of the NVIDIA driver) is opened at run time: nothing to link, and on a
 * machine without it the monitor reports nothing. A thread samples every 20 ms between start and stop. The
 * few NVML declarations needed are written out here (its header is not part of every CUDA install). */
#include "cuda/cuda_common.h"

#include "common/clock.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MONITOR_PERIOD_MS 20
#define MONITOR_MAX_SAMPLES 65536 /* 22 minutes of samples; later ones are dropped */

typedef int nvml_return;                     /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device_st *nvml_device; /* nvmlDevice_t */
enum { NVML_CLOCK_SM = 1 };                  /* nvmlClockType_t */
#define NVML_REASON_SW_POWER_CAP 0x4ull      /* nvmlClocksThrottleReasonSwPowerCap */

struct nvml_api {
    void *lib;
    nvml_return (*init)(void);
    nvml_return (*shutdown)(void);
    nvml_return (*by_pci)(const char *bus_id, nvml_device *dev);
    nvml_return (*clock)(nvml_device dev, int type, unsigned *mhz);
    nvml_return (*max_clock)(nvml_device dev, int type, unsigned *mhz);
    nvml_return (*power)(nvml_device dev, unsigned *milliwatts);
    nvml_return (*power_limit)(nvml_device dev, unsigned *milliwatts);
    nvml_return (*reasons)(nvml_device dev, unsigned long long *mask);
    nvml_return (*energy)(nvml_device dev, unsigned long long *millijoules); /* NULL where NVML lacks it */
};

struct qlt_clock_monitor {
    nvml_api api;
    nvml_device dev;
    pthread_t thread;
    int running;
    volatile int stop;
    float *mhz;          /* [MONITOR_MAX_SAMPLES] */
    float *watts;        /* [MONITOR_MAX_SAMPLES] */
    unsigned char *capped; /* [MONITOR_MAX_SAMPLES] */
    int n;
    unsigned long long energy_start_mj; /* the device's energy counter at start (0: not available) */
    double start_s;                     /* qlt_now_seconds() at start */
};

static bool nvml_open(nvml_api *a) {
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) return false;
#define SYM(field, name) *(void **)&a->field = dlsym(a->lib, name)
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(clock, "nvmlDeviceGetClockInfo");
    SYM(max_clock, "nvmlDeviceGetMaxClockInfo");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!a->reasons) SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
#undef SYM
    if (a->init && a->shutdown && a->by_pci && a->clock && a->max_clock && a->power && a->power_limit &&
        a->reasons && a->init() == 0)
        return true;
    dlclose(a->lib);
    a->lib = NULL;
    return false;
}

static void *sample_loop(void *arg) {
    qlt_clock_monitor *m = (qlt_clock_monitor *)arg;
    const struct timespec period = {0, MONITOR_PERIOD_MS * 1000000L};
    while (!m->stop) {
        unsigned mhz = 0, mw = 0;
        unsigned long long why = 0;
        if (m->n < MONITOR_MAX_SAMPLES && m->api.clock(m->dev, NVML_CLOCK_SM, &mhz) == 0 &&
            m->api.power(m->dev, &mw) == 0 && m->api.reasons(m->dev, &why) == 0) {
            m->mhz[m->n] = (float)mhz;
            m->watts[m->n] = mw / 1000.0f;
            m->capped[m->n] = (why & NVML_REASON_SW_POWER_CAP) != 0;
            m->n++;
        }
        nanosleep(&period, NULL);
    }
    return NULL;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

qlt_clock_monitor *qlt_cuda_clock_monitor_start(int device) {
    char bus[32];
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    qlt_clock_monitor *m = (qlt_clock_monitor *)calloc(1, sizeof *m);
    if (!m) return NULL;
    if (!nvml_open(&m->api)) {
        free(m);
        return NULL;
    }
    m->mhz = (float *)malloc(sizeof(float) * MONITOR_MAX_SAMPLES);
    m->watts = (float *)malloc(sizeof(float) * MONITOR_MAX_SAMPLES);
    m->capped = (unsigned char *)malloc(MONITOR_MAX_SAMPLES);
    if (m->mhz && m->watts && m->capped && m->api.by_pci(bus, &m->dev) == 0 &&
        pthread_create(&m->thread, NULL, sample_loop, m) == 0) {
        m->running = 1;
        /* the energy counter is read when the device is idle at both ends (the caller synchronizes) */
        if (m->api.energy && m->api.energy(m->dev, &m->energy_start_mj) != 0) m->energy_start_mj = 0;
        m->start_s = qlt_now_seconds();
        return m;
    }
    qlt_cuda_clock_monitor_stop(m, NULL);
    return NULL;
}

void qlt_cuda_clock_monitor_stop(qlt_clock_monitor *m, qlt_clock_report *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!m) return;
    unsigned long long energy_mj = 0;
    const double wall_s = qlt_now_seconds() - m->start_s;
    if (m->running && m->energy_start_mj && m->api.energy(m->dev, &energy_mj) != 0) energy_mj = 0;
    if (m->running) {
        m->stop = 1;
        pthread_join(m->thread, NULL);
    }
    if (out && energy_mj > m->energy_start_mj && m->energy_start_mj) {
        out->energy_j = (double)(energy_mj - m->energy_start_mj) / 1e3;
        out->energy_wall_s = wall_s;
    }
    if (out && m->n > 0) {
        unsigned max_mhz = 0, limit_mw = 0;
        double watts = 0;
        int capped = 0;
        for (int i = 0; i < m->n; i++) watts += m->watts[i], capped += m->capped[i];
        qsort(m->mhz, (size_t)m->n, sizeof(float), cmp_float);
        out->samples = m->n;
        out->sm_mhz_median = m->mhz[m->n / 2];
        out->sm_mhz_min = m->mhz[0];
        out->power_w_mean = watts / m->n;
        out->capped_share = (double)capped / m->n;
        if (m->api.max_clock(m->dev, NVML_CLOCK_SM, &max_mhz) == 0) out->sm_mhz_max = max_mhz;
        if (m->api.power_limit(m->dev, &limit_mw) == 0) out->power_limit_w = limit_mw / 1000.0;
    }
    if (m->api.lib) {
        m->api.shutdown();
        dlclose(m->api.lib);
    }
    free(m->mhz);
    free(m->watts);
    free(m->capped);
    free(m);
}
