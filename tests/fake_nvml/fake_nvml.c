/*
 * A stand-in for libnvidia-ml.so.1 (SONAME included), so the real nvidia-ml-py
 * binding runs unchanged in tests on machines without a GPU.
 *
 * It implements only the entry points gpulse's NVML source calls, with the
 * real signatures, struct layouts and error codes, so the binding raises its
 * real exception classes. Readings are fixed constants (below) so tests can
 * check unit conversions exactly; the counters (NVLink throughput, energy)
 * grow at fixed rates from nvmlInit, so tests can check rates too.
 *
 * Configuration: FAKE_NVML_CONFIG, read at every nvmlInit, or
 * fakeNvmlConfigure(text) at any time. "key=value" pairs separated by ';':
 *   gpus=N               number of GPUs (default 1, at most 16)
 *   name=TEXT            product name (default "NVIDIA H100 80GB HBM3")
 *   init_error=CODE      nvmlInit returns CODE (9 = driver not loaded)
 *   device_error=CODE    every device call returns CODE (the driver went away)
 *   lost=I,J             GPUs answering GPU_IS_LOST to everything but
 *                        nvmlDeviceGetHandleByIndex
 *   unsupported=R,R      readings answering NOT_SUPPORTED on every GPU, from:
 *                        util memory temp power power_limit clocks fan
 *                        throttle ecc pcie nvlink events procs energy
 *                        pcie_replay mem_temp, and the health readings
 *                        pcie_gen pcie_width pcie_gen_max pcie_width_max
 *                        remap retired retired_pending ecc_mode persistence
 *                        compute_mode mig vbios nvlink_state nvlink_errors
 *                        cuda (nvmlSystemGetCudaDriverVersion_v2)
 *                        gpm (GPU Performance Monitoring, as before Hopper:
 *                        nvmlGpmQueryDeviceSupport says unsupported and
 *                        nvmlGpmSampleGet answers NOT_SUPPORTED)
 *   hang=I:SECONDS       GPU I's utilization call sleeps SECONDS first
 *   xid=I:CODE,I:CODE    XID events waiting on GPU I, each delivered once
 *   procs=I:PID:BYTES:K  processes on GPU I (K: c compute, g graphics;
 *                        BYTES "na" = not available, as under WDDM)
 *   throttle=MASK        clock event reasons on every GPU (default 0x4)
 *   gpm=I:GR:SM:OCC:TENSOR:HMMA:IMMA:DMMA:DRAM:FP64:FP32:FP16,...
 *                        GPU I's GPM activity in percent (graphics engine,
 *                        SM activity, SM occupancy, any tensor pipe, HMMA,
 *                        IMMA, DMMA, DRAM bandwidth, FP64, FP32, FP16);
 *                        "na" answers that metric NOT_SUPPORTED, values left
 *                        out keep their defaults (below)
 *   gpm_error=I:CODE     GPU I's nvmlGpmSampleGet (and nvmlGpmMigSampleGet) answers CODE
 *   proc_util=I:PID:SM:MEM,...
 *                        process PID's samples on GPU I for nvmlDeviceGetProcessUtilization
 *                        (SM and memory utilization in %); a process of procs= without one
 *                        has no sample, as a real GPU leaves out a process idle all period.
 *                        unsupported=proc_util answers NOT_SUPPORTED (as on a GPU before
 *                        Maxwell), and so does a GPU with MIG on or a MIG device's handle.
 *
 * MIG (Multi-Instance GPU), on the GPUs whose MIG mode is on (mig=1:1, and mig_on):
 *   mig_on=I,J           GPUs the mig setting applies to; the others have MIG off
 *                        (default: every GPU)
 *   mig_devices=I:SLOT:GI:CI:PROFILE,...
 *                        GPU I's MIG device at slot SLOT (0..6, the index of
 *                        nvmlDeviceGetMigDeviceHandleByIndex): GPU instance GI
 *                        (0..14), compute instance CI (0..7), profile name
 *                        ("1g.10gb"). A slot not listed is empty: NOT_FOUND,
 *                        as a real GPU's slots have gaps once instances are
 *                        destroyed.
 *   procs=I:PID:BYTES:K:GI:CI  a process in GPU I's MIG device GI/CI
 *   gpm_mig=I:GI:GR:SM:...     GPU I's GPU instance GI's GPM activity, as gpm=
 *
 * As the NVML header says: nvmlDeviceGetMaxMigDeviceCount answers 7 on a GPU
 * with MIG on and 0 otherwise; nvmlDeviceGetMigDeviceHandleByIndex answers
 * INVALID_ARGUMENT past that count and NOT_FOUND for an empty slot; a MIG
 * device handle answers nvmlDeviceIsMigDeviceHandle, GetGpuInstanceId,
 * GetComputeInstanceId, GetDeviceHandleFromMigDeviceHandle, GetUUID
 * ("MIG-..."), GetName ("<GPU name> MIG <profile>", as nvidia-smi -L shows
 * it), GetMemoryInfo(_v2) and Get*RunningProcesses (its own processes), and
 * INVALID_ARGUMENT to the board readings; a handle whose device went away
 * (reconfigured) answers INVALID_ARGUMENT. On a GPU with MIG on,
 * nvmlDeviceGetUtilizationRates answers NOT_SUPPORTED and the processes of the
 * GPU's handle are every instance's (a privileged caller's aggregate), with
 * their GPU and compute instance ids. nvmlGpmMigSampleGet(GPU, GI) samples
 * one GPU instance (default activity: half GPU 0's default, plus GI: SM
 * 35+GI %...); nvmlGpmMetricsGet refuses samples of two GPU instances.
 *
 * Health readings, the same on every GPU unless pcie_on / nvlink_down_on say otherwise
 * (defaults: a healthy H100 SXM):
 *   pcie=GEN:GENMAX:WIDTH:WIDTHMAX   PCIe link, current and maximum (5:5:16:16)
 *   remapped=CORR:UNC:PENDING:FAILURE  nvmlDeviceGetRemappedRows (0:0:0:0)
 *   retired=SBE:DBE:PENDING  retired pages per cause and the pending flag (0:0:0)
 *   ecc_mode=CUR:PENDING     (1:1)      persistence=0|1 (1)
 *   compute_mode=N           nvmlComputeMode_t (0, Default)
 *   mig=CUR:PENDING          (0:0)      vbios=TEXT (96.00.99.00.01)
 *   nvlinks=N                links the GPU has (4, at most 36); the
 *                            throughput fields and nvmlDeviceGetNvLinkState
 *                            answer for links 0..N-1, INVALID_ARGUMENT beyond
 *   nvlink_down=L,L          links whose state is inactive
 *   pcie_on=I,J              GPUs the pcie setting applies to; the others
 *                            report their maximum link (default: every GPU)
 *   nvlink_down_on=I,J       GPUs nvlink_down applies to (default: every GPU)
 *   nvlink_errors=FLIT:DATA:REPLAY:RECOVERY  each link's error counters (0:0:0:0)
 *   driver=TEXT              driver version (550.54.15)
 *   cuda=N                   CUDA driver version, 1000*major + 10*minor (12040)
 *
 * Readings of GPU i:
 *   utilization 90+i %, memory controller 60+i %, temperature 60+i C,
 *   memory total 85520809984 B, used 61203283968 + i GiB (v2: excluding the
 *   563085312 B reserved; v1 "used" includes them), power 612400 + 1000*i mW,
 *   enforced limit 700000 mW, SM clock 1980 MHz, memory clock 2619 MHz,
 *   fan 40+i %, volatile uncorrected ECC i, PCIe TX 1171875 KB/s and
 *   RX 3125000 KB/s, 4 NVLink links each counting 2500000 KiB/s TX and
 *   1250000 KiB/s RX since nvmlInit, total energy 48213775401 + i mJ at
 *   nvmlInit growing at the power above (mW x s = mJ, so 612.4 + i J each
 *   second), PCIe replays i, memory temperature 70+i C (field value
 *   NVML_FI_DEV_MEMORY_TEMP), GPM activity (percent) graphics engine 80+i,
 *   SM 70+i, occupancy 40+i, any tensor 50+i, HMMA 45+i, IMMA 4+i, DMMA 1+i,
 *   DRAM 60+i, FP64 2+i, FP32 20+i, FP16 8+i.
 *
 * GPM as the NVML header describes it: nvmlGpmSampleGet records the GPU's
 * activity counters (here: each metric's percentage integrated over
 * CLOCK_MONOTONIC seconds, advanced at every sample) and nvmlGpmMetricsGet
 * computes each metric from two samples, the counters' difference over the
 * time between them. It refuses (INVALID_ARGUMENT) a sample never filled,
 * samples of two GPUs, and a sample2 not newer than sample1, so a collector
 * that passes the same sample twice or swaps them fails in tests.
 *
 * Process utilization as the NVML header describes it: the driver takes a sample of each
 * process every PROC_UTIL_PERIOD_US and keeps the last PROC_UTIL_KEPT of them (here: on the
 * wall clock's period boundaries, the CPU timestamp in µs, as the driver's timeStamp);
 * nvmlDeviceGetProcessUtilization returns those newer than lastSeenTimeStamp (0: all kept),
 * oldest first, NOT_FOUND where there are none. Called with no buffer, it answers the count
 * and INSUFFICIENT_SIZE; with a buffer too small for what is there by then (a period ended
 * between the two calls), it fills what fits and answers the count written.
 *
 * fakeNvmlUtilizationCalls(i) counts the utilization calls GPU i received,
 * so a test can tell whether a GPU was read again. fakeNvmlGpmWindow(i) is
 * the time between the two samples of GPU i's last nvmlGpmMetricsGet (s).
 *
 * Built with -DFAKE_NVML_R470 it lacks the entry points newer drivers added
 * (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetCurrentClocksEventReasons, the
 * nvmlGpm* functions of R520).
 */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

typedef int nvmlReturn_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_GPUS 16
#define MAX_PROCS 64
#define MAX_XIDS 64
#define MIG_SLOTS 7          /* nvmlDeviceGetMaxMigDeviceCount on an A100 or H100 */
#define MAX_GPU_INSTANCES 15 /* GPU instance ids 0..14 */
#define NO_INSTANCE 0xFFFFFFFFu

#define NVLINK_LINKS 4
#define NVLINK_MAX_LINKS 36
#define NVLINK_TX_KIB_PER_S 2500000ULL
#define NVLINK_RX_KIB_PER_S 1250000ULL
#define FI_NVLINK_LINK_COUNT 91
#define FI_NVLINK_THROUGHPUT_DATA_TX 138
#define FI_NVLINK_THROUGHPUT_DATA_RX 139
#define FI_MEMORY_TEMP 82
#define ENERGY_MJ 48213775401ULL

#define EVENT_XID_CRITICAL_ERROR 0x8ULL
#define MEMORY_V2_VERSION 0x02000028u
#define MEMORY_TOTAL 85520809984ULL
#define MEMORY_USED 61203283968ULL
#define MEMORY_RESERVED 563085312ULL
#define GIB (1ULL << 30)
#define MIB (1ULL << 20)
/* MIG device GI/CI: total 9.5 GiB + GI GiB (v2: less 30 MiB reserved), used 512 MiB + (8*GI + CI) MiB */
#define MIG_MEMORY_TOTAL 10200547328ULL
#define MIG_MEMORY_RESERVED (30 * MIB)
#define MIG_MEMORY_USED (512 * MIB)

enum reading {
    R_UTIL = 1 << 0, R_MEMORY = 1 << 1, R_TEMP = 1 << 2, R_POWER = 1 << 3,
    R_POWER_LIMIT = 1 << 4, R_CLOCKS = 1 << 5, R_FAN = 1 << 6, R_THROTTLE = 1 << 7,
    R_ECC = 1 << 8, R_PCIE = 1 << 9, R_NVLINK = 1 << 10, R_EVENTS = 1 << 11,
    R_PROCS = 1 << 12, R_ENERGY = 1 << 13, R_PCIE_REPLAY = 1 << 14, R_MEM_TEMP = 1 << 15,
    R_PCIE_GEN = 1 << 16, R_PCIE_WIDTH = 1 << 17, R_PCIE_GEN_MAX = 1 << 18, R_PCIE_WIDTH_MAX = 1 << 19,
    R_REMAP = 1 << 20, R_RETIRED = 1 << 21, R_RETIRED_PENDING = 1 << 22, R_ECC_MODE = 1 << 23,
    R_PERSISTENCE = 1 << 24, R_COMPUTE_MODE = 1 << 25, R_MIG = 1 << 26, R_VBIOS = 1 << 27,
    R_NVLINK_STATE = 1 << 28, R_NVLINK_ERRORS = 1 << 29, R_CUDA = 1 << 30,
};
#define R_GPM (1u << 31) /* past int's range, so not in the enum */
#define R_PROC_UTIL (1ULL << 32)

static const struct { const char *name; unsigned long long bit; } READINGS[] = {
    {"util", R_UTIL}, {"memory", R_MEMORY}, {"temp", R_TEMP}, {"power", R_POWER},
    {"power_limit", R_POWER_LIMIT}, {"clocks", R_CLOCKS}, {"fan", R_FAN},
    {"throttle", R_THROTTLE}, {"ecc", R_ECC}, {"pcie", R_PCIE}, {"nvlink", R_NVLINK},
    {"events", R_EVENTS}, {"procs", R_PROCS}, {"energy", R_ENERGY}, {"pcie_replay", R_PCIE_REPLAY},
    {"mem_temp", R_MEM_TEMP}, {"pcie_gen", R_PCIE_GEN}, {"pcie_width", R_PCIE_WIDTH},
    {"pcie_gen_max", R_PCIE_GEN_MAX}, {"pcie_width_max", R_PCIE_WIDTH_MAX}, {"remap", R_REMAP},
    {"retired", R_RETIRED}, {"retired_pending", R_RETIRED_PENDING}, {"ecc_mode", R_ECC_MODE},
    {"persistence", R_PERSISTENCE}, {"compute_mode", R_COMPUTE_MODE}, {"mig", R_MIG}, {"vbios", R_VBIOS},
    {"nvlink_state", R_NVLINK_STATE}, {"nvlink_errors", R_NVLINK_ERRORS}, {"cuda", R_CUDA}, {"gpm", R_GPM},
    {"proc_util", R_PROC_UTIL},
};

/* The GPM metrics the fake keeps, in the order of the gpm= setting: NVML_GPM_METRIC_* id and
 * GPU i's default percentage, base + i. */
static const struct { unsigned int id; const char *name; double base; } GPM_METRICS[] = {
    {1, "GRAPHICS_UTIL", 80}, {2, "SM_UTIL", 70}, {3, "SM_OCCUPANCY", 40}, {5, "ANY_TENSOR_UTIL", 50},
    {7, "HMMA_TENSOR_UTIL", 45}, {9, "IMMA_TENSOR_UTIL", 4}, {8, "DMMA_TENSOR_UTIL", 1},
    {10, "DRAM_BW_UTIL", 60}, {11, "FP64_UTIL", 2}, {12, "FP32_UTIL", 20}, {13, "FP16_UTIL", 8},
};
#define GPM_COUNT (int)(sizeof GPM_METRICS / sizeof GPM_METRICS[0])

/* The binding's structs, field for field. */
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    long long sllVal; int siVal; unsigned short usVal;
} nvmlValue_t;
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

struct fake_device { int index, slot; }; /* slot -1: the GPU; else its MIG device at that slot */
typedef struct fake_device *nvmlDevice_t;
struct fake_event_set { unsigned long long registered[MAX_GPUS]; };
typedef struct fake_event_set *nvmlEventSet_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct fake_process { int gpu; unsigned int pid; unsigned long long bytes; char kind; unsigned int gi, ci; };
struct fake_mig { int present; unsigned int gi, ci; char profile[32]; };
struct fake_xid { int gpu; unsigned long long code; };
struct fake_proc_util { int gpu; unsigned int pid, sm, mem; };

static struct {
    int gpus;
    char name[96];
    nvmlReturn_t init_error, device_error;
    unsigned int lost;          /* bit per GPU */
    unsigned long long unsupported; /* enum reading bits, R_GPM, R_PROC_UTIL */
    int hang_gpu;
    double hang_seconds;
    unsigned long long throttle;
    struct fake_process procs[MAX_PROCS];
    int nprocs;
    struct fake_proc_util proc_utils[MAX_PROCS];
    int nproc_utils;
    struct fake_xid xids[MAX_XIDS];
    int nxids;
    unsigned int pcie[4];       /* current gen, max gen, current width, max width */
    unsigned int remapped[4];   /* correctable, uncorrectable, pending, failure */
    unsigned int retired[3];    /* single-bit cause, double-bit cause, pending */
    unsigned int ecc_mode[2], mig[2], persistence, compute_mode;
    char vbios[32], driver[32];
    int cuda;
    int nvlinks;
    unsigned long long nvlink_down; /* bit per link */
    unsigned int pcie_on, nvlink_down_on; /* bit per GPU; 0: every GPU */
    unsigned long long nvlink_errors[4]; /* per link, by nvmlNvLinkErrorCounter_t order below */
    double gpm[MAX_GPUS][GPM_COUNT];     /* percent; NAN: not supported */
    unsigned int gpm_set[MAX_GPUS];      /* bit per GPM_METRICS entry that gpm= configured */
    nvmlReturn_t gpm_error[MAX_GPUS];
    unsigned int mig_on;                 /* bit per GPU; 0: every GPU */
    struct fake_mig migs[MAX_GPUS][MIG_SLOTS];
    double gpm_mig[MAX_GPUS][MAX_GPU_INSTANCES][GPM_COUNT];
    unsigned int gpm_mig_set[MAX_GPUS][MAX_GPU_INSTANCES];
} cfg;

static struct fake_device devices[MAX_GPUS];
static struct fake_device mig_devices[MAX_GPUS][MIG_SLOTS];
static int utilization_calls[MAX_GPUS]; /* kept across reconfiguration */
static int initialized;
static double init_time;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec / 1e6;
}

/* "GR:SM:..." after the ids: GPM percentages in GPM_METRICS order, "na" for not supported. */
static void parse_percentages(char **save, double *percent, unsigned int *set)
{
    char *field;
    for (int k = 0; k < GPM_COUNT && (field = strtok_r(NULL, ":", save)); k++) {
        percent[k] = strcmp(field, "na") ? strtod(field, NULL) : NAN;
        *set |= 1u << k;
    }
}

/* "I:GR:SM:...": GPU I's GPM percentages. */
static void parse_gpm(char *item)
{
    char *save = NULL, *field = strtok_r(item, ":", &save);
    int gpu = field ? atoi(field) : -1;
    if (gpu < 0 || gpu >= MAX_GPUS) return;
    parse_percentages(&save, cfg.gpm[gpu], &cfg.gpm_set[gpu]);
}

/* "I:GI:GR:SM:...": GPU I's GPU instance GI's GPM percentages. */
static void parse_gpm_mig(char *item)
{
    char *save = NULL, *field = strtok_r(item, ":", &save);
    int gpu = field ? atoi(field) : -1;
    field = strtok_r(NULL, ":", &save);
    int gi = field ? atoi(field) : -1;
    if (gpu < 0 || gpu >= MAX_GPUS || gi < 0 || gi >= MAX_GPU_INSTANCES) return;
    parse_percentages(&save, cfg.gpm_mig[gpu][gi], &cfg.gpm_mig_set[gpu][gi]);
}

/* "I:SLOT:GI:CI:PROFILE": a MIG device. */
static void parse_mig_device(const char *item)
{
    int gpu = -1, slot = -1;
    unsigned int gi = 0, ci = 0;
    char profile[32] = "";
    if (sscanf(item, "%d:%d:%u:%u:%31s", &gpu, &slot, &gi, &ci, profile) != 5) return;
    if (gpu < 0 || gpu >= MAX_GPUS || slot < 0 || slot >= MIG_SLOTS || gi >= MAX_GPU_INSTANCES) return;
    struct fake_mig *mig = &cfg.migs[gpu][slot];
    *mig = (struct fake_mig){1, gi, ci, ""};
    snprintf(mig->profile, sizeof mig->profile, "%s", profile);
}

static void parse_list(const char *key, char *value)
{
    char *save = NULL;
    for (char *item = strtok_r(value, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (!strcmp(key, "lost")) {
            cfg.lost |= 1u << atoi(item);
        } else if (!strcmp(key, "unsupported")) {
            for (size_t i = 0; i < sizeof READINGS / sizeof READINGS[0]; i++)
                if (!strcmp(item, READINGS[i].name)) cfg.unsupported |= READINGS[i].bit;
        } else if (!strcmp(key, "nvlink_down")) {
            cfg.nvlink_down |= 1ULL << atoi(item);
        } else if (!strcmp(key, "pcie_on")) {
            cfg.pcie_on |= 1u << atoi(item);
        } else if (!strcmp(key, "nvlink_down_on")) {
            cfg.nvlink_down_on |= 1u << atoi(item);
        } else if (!strcmp(key, "mig_on")) {
            cfg.mig_on |= 1u << atoi(item);
        } else if (!strcmp(key, "mig_devices")) {
            parse_mig_device(item);
        } else if (!strcmp(key, "gpm_mig")) {
            parse_gpm_mig(item);
        } else if (!strcmp(key, "gpm")) {
            parse_gpm(item);
        } else if (!strcmp(key, "gpm_error")) {
            int gpu = -1, code = 0;
            if (sscanf(item, "%d:%d", &gpu, &code) == 2 && gpu >= 0 && gpu < MAX_GPUS) cfg.gpm_error[gpu] = code;
        } else if (!strcmp(key, "xid") && cfg.nxids < MAX_XIDS) {
            struct fake_xid *x = &cfg.xids[cfg.nxids++];
            sscanf(item, "%d:%llu", &x->gpu, &x->code);
        } else if (!strcmp(key, "proc_util") && cfg.nproc_utils < MAX_PROCS) {
            struct fake_proc_util *u = &cfg.proc_utils[cfg.nproc_utils];
            if (sscanf(item, "%d:%u:%u:%u", &u->gpu, &u->pid, &u->sm, &u->mem) == 4) cfg.nproc_utils++;
        } else if (!strcmp(key, "procs") && cfg.nprocs < MAX_PROCS) {
            struct fake_process *p = &cfg.procs[cfg.nprocs++];
            char bytes[32] = "", kind = 'c';
            p->gi = p->ci = NO_INSTANCE;
            sscanf(item, "%d:%u:%31[^:]:%c:%u:%u", &p->gpu, &p->pid, bytes, &kind, &p->gi, &p->ci);
            p->bytes = strcmp(bytes, "na") ? strtoull(bytes, NULL, 10) : ~0ULL;
            p->kind = kind;
        }
    }
}

/* Replace the whole configuration with the one in `text` (NULL: defaults). */
int fakeNvmlConfigure(const char *text)
{
    pthread_mutex_lock(&lock);
    memset(&cfg, 0, sizeof cfg);
    cfg.gpus = 1;
    cfg.hang_gpu = -1;
    cfg.throttle = 0x4;
    strcpy(cfg.name, "NVIDIA H100 80GB HBM3");
    cfg.pcie[0] = cfg.pcie[1] = 5;
    cfg.pcie[2] = cfg.pcie[3] = 16;
    cfg.ecc_mode[0] = cfg.ecc_mode[1] = 1;
    cfg.persistence = 1;
    strcpy(cfg.vbios, "96.00.99.00.01");
    strcpy(cfg.driver, "550.54.15");
    cfg.cuda = 12040;
    cfg.nvlinks = NVLINK_LINKS;
    char *copy = strdup(text ? text : ""), *save = NULL;
    for (char *pair = strtok_r(copy, ";", &save); pair; pair = strtok_r(NULL, ";", &save)) {
        char *value = strchr(pair, '=');
        if (!value) continue;
        *value++ = '\0';
        if (!strcmp(pair, "gpus")) cfg.gpus = atoi(value) < MAX_GPUS ? atoi(value) : MAX_GPUS;
        else if (!strcmp(pair, "name")) snprintf(cfg.name, sizeof cfg.name, "%s", value);
        else if (!strcmp(pair, "init_error")) cfg.init_error = atoi(value);
        else if (!strcmp(pair, "device_error")) cfg.device_error = atoi(value);
        else if (!strcmp(pair, "hang")) sscanf(value, "%d:%lf", &cfg.hang_gpu, &cfg.hang_seconds);
        else if (!strcmp(pair, "throttle")) cfg.throttle = strtoull(value, NULL, 0);
        else if (!strcmp(pair, "pcie"))
            sscanf(value, "%u:%u:%u:%u", &cfg.pcie[0], &cfg.pcie[1], &cfg.pcie[2], &cfg.pcie[3]);
        else if (!strcmp(pair, "remapped"))
            sscanf(value, "%u:%u:%u:%u", &cfg.remapped[0], &cfg.remapped[1], &cfg.remapped[2], &cfg.remapped[3]);
        else if (!strcmp(pair, "retired")) sscanf(value, "%u:%u:%u", &cfg.retired[0], &cfg.retired[1], &cfg.retired[2]);
        else if (!strcmp(pair, "ecc_mode")) sscanf(value, "%u:%u", &cfg.ecc_mode[0], &cfg.ecc_mode[1]);
        else if (!strcmp(pair, "mig")) sscanf(value, "%u:%u", &cfg.mig[0], &cfg.mig[1]);
        else if (!strcmp(pair, "persistence")) cfg.persistence = atoi(value);
        else if (!strcmp(pair, "compute_mode")) cfg.compute_mode = atoi(value);
        else if (!strcmp(pair, "vbios")) snprintf(cfg.vbios, sizeof cfg.vbios, "%s", value);
        else if (!strcmp(pair, "driver")) snprintf(cfg.driver, sizeof cfg.driver, "%s", value);
        else if (!strcmp(pair, "cuda")) cfg.cuda = atoi(value);
        else if (!strcmp(pair, "nvlinks"))
            cfg.nvlinks = atoi(value) < NVLINK_MAX_LINKS ? atoi(value) : NVLINK_MAX_LINKS;
        else if (!strcmp(pair, "nvlink_errors"))
            sscanf(value, "%llu:%llu:%llu:%llu", &cfg.nvlink_errors[0], &cfg.nvlink_errors[1],
                   &cfg.nvlink_errors[2], &cfg.nvlink_errors[3]);
        else parse_list(pair, value);
    }
    free(copy);
    for (int i = 0; i < MAX_GPUS; i++) {
        devices[i] = (struct fake_device){i, -1};
        for (int slot = 0; slot < MIG_SLOTS; slot++) mig_devices[i][slot] = (struct fake_device){i, slot};
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

int fakeNvmlUtilizationCalls(int index)
{
    return index >= 0 && index < MAX_GPUS ? __atomic_load_n(&utilization_calls[index], __ATOMIC_SEQ_CST) : -1;
}

/* Common checks of every device call; sets *index on success. */
static nvmlReturn_t device_check(nvmlDevice_t device, unsigned long long reading, int *index)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device < devices || device >= devices + cfg.gpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.device_error) return cfg.device_error;
    *index = device->index;
    if (cfg.lost & (1u << *index)) return NVML_ERROR_GPU_IS_LOST;
    if (cfg.unsupported & reading) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

#define CHECK(device, reading)                                  \
    int index;                                                  \
    nvmlReturn_t check = device_check(device, reading, &index); \
    if (check != NVML_SUCCESS) return check;

static int applies(unsigned int gpus, int index);

static int mig_enabled(int index)
{
    return cfg.mig[0] && applies(cfg.mig_on, index);
}

static int is_mig_handle(nvmlDevice_t device)
{
    return device >= &mig_devices[0][0] && device < &mig_devices[0][0] + MAX_GPUS * MIG_SLOTS;
}

/* device_check for the calls that take a GPU's or a MIG device's handle; *mig is NULL for a GPU's. */
static nvmlReturn_t any_device_check(nvmlDevice_t device, unsigned long long reading, int *index,
                                     const struct fake_mig **mig)
{
    *mig = NULL;
    if (!is_mig_handle(device)) return device_check(device, reading, index);
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device->index >= cfg.gpus) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.device_error) return cfg.device_error;
    *index = device->index;
    if (cfg.lost & (1u << *index)) return NVML_ERROR_GPU_IS_LOST;
    if (!mig_enabled(*index) || !cfg.migs[*index][device->slot].present) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.unsupported & reading) return NVML_ERROR_NOT_SUPPORTED;
    *mig = &cfg.migs[*index][device->slot];
    return NVML_SUCCESS;
}

#define ANY_CHECK(device, reading)                                       \
    int index;                                                           \
    const struct fake_mig *mig;                                          \
    nvmlReturn_t check = any_device_check(device, reading, &index, &mig); \
    if (check != NVML_SUCCESS) return check;

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    const char *text = getenv("FAKE_NVML_CONFIG");
    if (text || !cfg.gpus) fakeNvmlConfigure(text);
    if (cfg.init_error) return cfg.init_error;
    pthread_mutex_lock(&lock);
    if (!initialized++) init_time = now();
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t ret = initialized ? (initialized--, NVML_SUCCESS) : NVML_ERROR_UNINITIALIZED;
    pthread_mutex_unlock(&lock);
    return ret;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (snprintf(version, length, "%s", cfg.driver) >= (int)length) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (cfg.unsupported & R_CUDA) return NVML_ERROR_NOT_SUPPORTED;
    *version = cfg.cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (cfg.device_error) return cfg.device_error;
    *count = cfg.gpus;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (cfg.device_error) return cfg.device_error;
    if (index >= (unsigned int)cfg.gpus) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    ANY_CHECK(device, 0);
    int written = mig ? snprintf(uuid, length, "MIG-fa4e0000-%04d-4000-8000-%06u%06u", index, mig->gi, mig->ci)
                      : snprintf(uuid, length, "GPU-fa4e0000-0000-4000-8000-%012d", index);
    return written >= (int)length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    ANY_CHECK(device, 0);
    int written = mig ? snprintf(name, length, "%s MIG %s", cfg.name, mig->profile)
                      : snprintf(name, length, "%s", cfg.name);
    return written >= (int)length ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    CHECK(device, R_UTIL);
    __atomic_fetch_add(&utilization_calls[index], 1, __ATOMIC_SEQ_CST);
    if (index == cfg.hang_gpu) {
        struct timespec hang = {(time_t)cfg.hang_seconds,
                                (long)((cfg.hang_seconds - (time_t)cfg.hang_seconds) * 1e9)};
        nanosleep(&hang, NULL);
    }
    if (mig_enabled(index)) return NVML_ERROR_NOT_SUPPORTED; /* the instances share the engines */
    utilization->gpu = 90 + index;
    utilization->memory = 60 + index;
    return NVML_SUCCESS;
}

/* A GPU's or MIG device's memory as the v2 call counts it: used leaves the reserved out. */
static void memory_v2(int index, const struct fake_mig *mig, nvmlMemory_v2_t *memory)
{
    if (mig) {
        memory->total = MIG_MEMORY_TOTAL + mig->gi * GIB;
        memory->reserved = MIG_MEMORY_RESERVED;
        memory->used = MIG_MEMORY_USED + (8 * mig->gi + mig->ci) * MIB;
    } else {
        memory->total = MEMORY_TOTAL;
        memory->reserved = MEMORY_RESERVED;
        memory->used = MEMORY_USED + index * GIB;
    }
    memory->free = memory->total - memory->reserved - memory->used;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    ANY_CHECK(device, R_MEMORY);
    nvmlMemory_v2_t v2;
    memory_v2(index, mig, &v2);
    memory->total = v2.total;
    memory->used = v2.used + v2.reserved;
    memory->free = v2.free;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_R470
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    ANY_CHECK(device, R_MEMORY);
    if (memory->version != MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_v2(index, mig, memory);
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor, unsigned int *temp)
{
    CHECK(device, R_TEMP);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU only */
    *temp = 60 + index;
    return NVML_SUCCESS;
}

/* GPU i's power draw; its energy counter grows at it. */
static unsigned int power_mw(int index) { return 612400 + 1000 * index; }

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts)
{
    CHECK(device, R_POWER);
    *milliwatts = power_mw(index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *milliwatts)
{
    CHECK(device, R_POWER_LIMIT);
    *milliwatts = 700000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type, unsigned int *mhz)
{
    CHECK(device, R_CLOCKS);
    if (type == 1) *mhz = 1980;      /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = 2619; /* NVML_CLOCK_MEM */
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *percent)
{
    CHECK(device, R_FAN);
    *percent = 40 + index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    CHECK(device, R_THROTTLE);
    *reasons = cfg.throttle;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_R470
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksThrottleReasons(device, reasons);
}
#endif

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int error_type,
                                         unsigned int counter_type, unsigned long long *count)
{
    CHECK(device, R_ECC);
    if (error_type > 1 || counter_type > 1) return NVML_ERROR_INVALID_ARGUMENT;
    /* Only uncorrected (1) volatile (0) counts equal i, so a wrong argument shows in tests. */
    *count = (error_type == 1 && counter_type == 0) ? (unsigned long long)index : 1000 + index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, unsigned int counter, unsigned int *kb_per_s)
{
    CHECK(device, R_PCIE);
    if (counter == 0) *kb_per_s = 1171875;      /* NVML_PCIE_UTIL_TX_BYTES */
    else if (counter == 1) *kb_per_s = 3125000; /* NVML_PCIE_UTIL_RX_BYTES */
    else return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *millijoules)
{
    CHECK(device, R_ENERGY);
    *millijoules = ENERGY_MJ + index + (unsigned long long)(power_mw(index) * (now() - init_time));
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    CHECK(device, R_PCIE_REPLAY);
    *value = index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t *values)
{
    CHECK(device, 0);
    double t = now();
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = (long long)(t * 1e6);
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_SUCCESS;
        int link_ok = v->scopeId < (unsigned int)cfg.nvlinks && !(cfg.unsupported & R_NVLINK);
        if (v->fieldId == FI_NVLINK_LINK_COUNT && !(cfg.unsupported & R_NVLINK)) {
            v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
            v->value.uiVal = cfg.nvlinks;
        } else if (v->fieldId == FI_NVLINK_THROUGHPUT_DATA_TX && link_ok) {
            v->valueType = 3; /* NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
            v->value.ullVal = (unsigned long long)((t - init_time) * NVLINK_TX_KIB_PER_S);
        } else if (v->fieldId == FI_NVLINK_THROUGHPUT_DATA_RX && link_ok) {
            v->valueType = 3;
            v->value.ullVal = (unsigned long long)((t - init_time) * NVLINK_RX_KIB_PER_S);
        } else if (v->fieldId == FI_MEMORY_TEMP && !(cfg.unsupported & R_MEM_TEMP)) {
            v->valueType = 1;
            v->value.uiVal = 70 + index;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}

/* A MIG device's handle lists its own processes; a GPU's, every process on the GPU (with MIG on,
 * the instances' processes, each with its ids: what a privileged caller gets). */
static nvmlReturn_t running_processes(nvmlDevice_t device, char kind, unsigned int *count, nvmlProcessInfo_t *infos)
{
    ANY_CHECK(device, R_PROCS);
    unsigned int found = 0;
    for (int i = 0; i < cfg.nprocs; i++) {
        const struct fake_process *p = &cfg.procs[i];
        if (p->gpu != index || p->kind != kind) continue;
        if (mig && (p->gi != mig->gi || p->ci != mig->ci)) continue;
        if (infos && found < *count) infos[found] = (nvmlProcessInfo_t){p->pid, p->bytes, p->gi, p->ci};
        found++;
    }
    nvmlReturn_t ret = (!infos || found > *count) && found ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = found;
    return ret;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos)
{
    return running_processes(device, 'c', count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_t *infos)
{
    return running_processes(device, 'g', count, infos);
}

/* Process utilization (see the top of this file). */

#define PROC_UTIL_PERIOD_US 166667ULL /* six samples a second */
#define PROC_UTIL_KEPT 6
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
    ANY_CHECK(device, R_PROC_UTIL);
    if (mig || mig_enabled(index)) return NVML_ERROR_NOT_SUPPORTED;
    if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long newest = (unsigned long long)(now() * 1e6) / PROC_UTIL_PERIOD_US * PROC_UTIL_PERIOD_US;
    unsigned int found = 0, written = 0;
    pthread_mutex_lock(&lock);
    for (int age = PROC_UTIL_KEPT - 1; age >= 0; age--) {
        unsigned long long taken = newest - age * PROC_UTIL_PERIOD_US;
        if (taken <= lastSeenTimeStamp) continue;
        for (int i = 0; i < cfg.nproc_utils; i++) {
            const struct fake_proc_util *u = &cfg.proc_utils[i];
            if (u->gpu != index) continue;
            found++;
            if (utilization && written < *processSamplesCount)
                utilization[written++] = (nvmlProcessUtilizationSample_t){u->pid, taken, u->sm, u->mem, 0, 0};
        }
    }
    pthread_mutex_unlock(&lock);
    if (!found) return NVML_ERROR_NOT_FOUND;
    if (!written) { /* no buffer, or room for none: how many there are */
        *processSamplesCount = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *processSamplesCount = written;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    CHECK(device, R_EVENTS);
    *types = EVENT_XID_CRITICAL_ERROR;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set)
{
    CHECK(device, R_EVENTS);
    if (types & ~EVENT_XID_CRITICAL_ERROR) return NVML_ERROR_NOT_SUPPORTED;
    set->registered[index] |= types;
    return NVML_SUCCESS;
}

/* Deliver the oldest waiting XID of a registered GPU; then report a lost one; else time out. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (cfg.device_error) return cfg.device_error;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < cfg.nxids; i++) {
        int gpu = cfg.xids[i].gpu;
        if (gpu < 0 || gpu >= MAX_GPUS || !(set->registered[gpu] & EVENT_XID_CRITICAL_ERROR)) continue;
        *data = (nvmlEventData_t){&devices[gpu], EVENT_XID_CRITICAL_ERROR, cfg.xids[i].code, 0xFFFFFFFFu, 0xFFFFFFFFu};
        memmove(&cfg.xids[i], &cfg.xids[i + 1], (cfg.nxids - i - 1) * sizeof cfg.xids[0]);
        cfg.nxids--;
        pthread_mutex_unlock(&lock);
        return NVML_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    for (int gpu = 0; gpu < cfg.gpus; gpu++)
        if (set->registered[gpu] && (cfg.lost & (1u << gpu))) return NVML_ERROR_GPU_IS_LOST;
    if (timeout_ms) {
        struct timespec wait = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
        nanosleep(&wait, NULL);
    }
    return NVML_ERROR_TIMEOUT;
}

/* The health readings (see the configuration above). */

static int applies(unsigned int gpus, int index)
{
    return !gpus || (gpus & (1u << index));
}

/* A current PCIe reading: the configured one on the GPUs of pcie_on, the maximum on the others. */
static nvmlReturn_t pcie_reading(nvmlDevice_t device, int reading, unsigned int value, unsigned int max,
                                 unsigned int *out)
{
    CHECK(device, reading);
    *out = applies(cfg.pcie_on, index) ? value : max;
    return NVML_SUCCESS;
}

static nvmlReturn_t uint_reading(nvmlDevice_t device, int reading, unsigned int value, unsigned int *out)
{
    CHECK(device, reading);
    (void)index;
    *out = value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return pcie_reading(device, R_PCIE_GEN, cfg.pcie[0], cfg.pcie[1], gen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen)
{
    return uint_reading(device, R_PCIE_GEN_MAX, cfg.pcie[1], gen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return pcie_reading(device, R_PCIE_WIDTH, cfg.pcie[2], cfg.pcie[3], width);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width)
{
    return uint_reading(device, R_PCIE_WIDTH_MAX, cfg.pcie[3], width);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failure)
{
    CHECK(device, R_REMAP);
    *corr = cfg.remapped[0];
    *unc = cfg.remapped[1];
    *pending = cfg.remapped[2];
    *failure = cfg.remapped[3];
    return NVML_SUCCESS;
}

/* As the real one: with no buffer, or one too small, it answers the count and INSUFFICIENT_SIZE. */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause, unsigned int *count,
                                       unsigned long long *addresses)
{
    CHECK(device, R_RETIRED);
    if (cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int pages = cfg.retired[cause];
    if (!addresses || *count < pages) {
        *count = pages;
        return pages ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    for (unsigned int i = 0; i < pages; i++) addresses[i] = 0x1000ULL * (i + 1) + cause;
    *count = pages;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int *pending)
{
    return uint_reading(device, R_RETIRED_PENDING, cfg.retired[2], pending);
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    CHECK(device, R_ECC_MODE);
    *current = cfg.ecc_mode[0];
    *pending = cfg.ecc_mode[1];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode)
{
    return uint_reading(device, R_PERSISTENCE, cfg.persistence, mode);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode)
{
    return uint_reading(device, R_COMPUTE_MODE, cfg.compute_mode, mode);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
    CHECK(device, R_MIG);
    int on = applies(cfg.mig_on, index);
    *current = on ? cfg.mig[0] : 0;
    *pending = on ? cfg.mig[1] : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    CHECK(device, R_VBIOS);
    if (snprintf(version, length, "%s", cfg.vbios) >= (int)length) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

static nvmlReturn_t nvlink_check(nvmlDevice_t device, int reading, unsigned int link, int *gpu)
{
    CHECK(device, reading);
    if (gpu) *gpu = index;
    return link < (unsigned int)cfg.nvlinks ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, unsigned int *active)
{
    int gpu;
    nvmlReturn_t ret = nvlink_check(device, R_NVLINK_STATE, link, &gpu);
    if (ret != NVML_SUCCESS) return ret;
    *active = !((cfg.nvlink_down & (1ULL << link)) && applies(cfg.nvlink_down_on, gpu));
    return NVML_SUCCESS;
}

/* nvmlNvLinkErrorCounter_t: DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2, DL_CRC_DATA 3. */
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, unsigned int counter,
                                             unsigned long long *value)
{
    static const int configured[] = {2, 3, 0, 1}; /* counter -> position in nvlink_errors=FLIT:DATA:REPLAY:RECOVERY */
    nvmlReturn_t ret = nvlink_check(device, R_NVLINK_ERRORS, link, NULL);
    if (ret != NVML_SUCCESS) return ret;
    if (counter > 3) return NVML_ERROR_NOT_SUPPORTED;
    *value = cfg.nvlink_errors[configured[counter]];
    return NVML_SUCCESS;
}

/* MIG (see the top of this file). */

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    CHECK(device, R_MIG);
    *count = mig_enabled(index) ? MIG_SLOTS : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int slot, nvmlDevice_t *migDevice)
{
    CHECK(device, R_MIG);
    if (!mig_enabled(index) || slot >= MIG_SLOTS) return NVML_ERROR_INVALID_ARGUMENT;
    if (!cfg.migs[index][slot].present) return NVML_ERROR_NOT_FOUND;
    *migDevice = &mig_devices[index][slot];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    ANY_CHECK(device, 0);
    (void)index;
    *isMigDevice = mig != NULL;
    return NVML_SUCCESS;
}

/* The calls only a MIG device's handle answers (a GPU's: NOT_SUPPORTED). */
static nvmlReturn_t mig_reading(nvmlDevice_t device, int gpu_instance, unsigned int *id)
{
    ANY_CHECK(device, 0);
    (void)index;
    if (!mig) return NVML_ERROR_NOT_SUPPORTED;
    *id = gpu_instance ? mig->gi : mig->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_reading(device, 1, id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_reading(device, 0, id);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    ANY_CHECK(migDevice, 0);
    if (!mig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_R470
/* GPM: GPU Performance Monitoring (see the top of this file). */

#define GPM_METRIC_MAX 477 /* the binding's NVML_GPM_METRIC_MAX: numMetrics may not exceed it */
#define GPM_METRICS_GET_VERSION 1
#define GPM_SUPPORT_VERSION 1

struct fake_gpm_sample { int gpu, gi, filled; double taken, counters[GPM_COUNT]; }; /* gi -1: the whole GPU */
typedef struct fake_gpm_sample *nvmlGpmSample_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version, numMetrics;
    nvmlGpmSample_t sample1, sample2;
    nvmlGpmMetric_t metrics[]; /* the caller's NVML_GPM_METRIC_MAX entries; numMetrics of them used */
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;

/* Per GPU, each metric's percentage integrated over seconds, and when it was last advanced:
 * kept across reconfiguration, so a changed gpm= setting applies from the next sample on. */
static double gpm_counters[MAX_GPUS][GPM_COUNT];
static double gpm_advanced[MAX_GPUS];
static double gpm_window[MAX_GPUS];
static double gpm_mig_counters[MAX_GPUS][MAX_GPU_INSTANCES][GPM_COUNT];
static double gpm_mig_advanced[MAX_GPUS][MAX_GPU_INSTANCES];

double fakeNvmlGpmWindow(int index)
{
    return index >= 0 && index < MAX_GPUS ? gpm_window[index] : -1;
}

static double monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double gpm_percent(int gpu, int gi, int k)
{
    if (gi >= 0)
        return cfg.gpm_mig_set[gpu][gi] & (1u << k) ? cfg.gpm_mig[gpu][gi][k] : GPM_METRICS[k].base / 2 + gi;
    return cfg.gpm_set[gpu] & (1u << k) ? cfg.gpm[gpu][k] : GPM_METRICS[k].base + gpu;
}

/* Advance the counters of GPU `gpu` (gi -1) or its GPU instance gi to now, and copy them into the sample. */
static void gpm_take(int gpu, int gi, double *counters, double *advanced, struct fake_gpm_sample *sample)
{
    pthread_mutex_lock(&lock);
    double t = monotonic();
    if (*advanced > 0)
        for (int k = 0; k < GPM_COUNT; k++) {
            double percent = gpm_percent(gpu, gi, k);
            if (!isnan(percent)) counters[k] += percent * (t - *advanced);
        }
    *advanced = t;
    sample->gpu = gpu;
    sample->gi = gi;
    sample->taken = t;
    memcpy(sample->counters, counters, sizeof sample->counters);
    sample->filled = 1;
    pthread_mutex_unlock(&lock);
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support)
{
    CHECK(device, 0);
    (void)index;
    if (!support) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = !(cfg.unsupported & R_GPM);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    *sample = calloc(1, sizeof **sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    free(sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample)
{
    CHECK(device, R_GPM);
    if (!sample) return NVML_ERROR_INVALID_ARGUMENT;
    if (cfg.gpm_error[index]) return cfg.gpm_error[index];
    gpm_take(index, -1, gpm_counters[index], &gpm_advanced[index], sample);
    return NVML_SUCCESS;
}

/* One GPU instance's sample: the GPU's handle and the instance's id, on a GPU with MIG on. */
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t sample)
{
    CHECK(device, R_GPM);
    if (!sample || !mig_enabled(index) || gpuInstanceId >= MAX_GPU_INSTANCES) return NVML_ERROR_INVALID_ARGUMENT;
    int exists = 0;
    for (int slot = 0; slot < MIG_SLOTS; slot++)
        exists |= cfg.migs[index][slot].present && cfg.migs[index][slot].gi == gpuInstanceId;
    if (!exists) return NVML_ERROR_NOT_FOUND;
    if (cfg.gpm_error[index]) return cfg.gpm_error[index];
    int gi = (int)gpuInstanceId;
    gpm_take(index, gi, gpm_mig_counters[index][gi], &gpm_mig_advanced[index][gi], sample);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!get) return NVML_ERROR_INVALID_ARGUMENT;
    if (get->version != GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const struct fake_gpm_sample *first = get->sample1, *second = get->sample2;
    if (!first || !second || !first->filled || !second->filled || first->gpu != second->gpu
        || first->gi != second->gi || second->taken <= first->taken || get->numMetrics > GPM_METRIC_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    double seconds = second->taken - first->taken;
    if (first->gi < 0) gpm_window[first->gpu] = seconds;
    for (unsigned int i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &get->metrics[i];
        memset(&metric->metricInfo, 0, sizeof metric->metricInfo);
        metric->value = 0;
        metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        for (int k = 0; k < GPM_COUNT; k++) {
            if (GPM_METRICS[k].id != metric->metricId || isnan(gpm_percent(first->gpu, first->gi, k))) continue;
            metric->value = (second->counters[k] - first->counters[k]) / seconds;
            metric->nvmlReturn = NVML_SUCCESS;
            metric->metricInfo.shortName = (char *)GPM_METRICS[k].name;
            metric->metricInfo.unit = (char *)"%";
        }
    }
    return NVML_SUCCESS;
}
#endif
