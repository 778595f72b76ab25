/*
 * rt_model.c — the host side of every compiled model, written once: mrt_model_create (the
 * device of each slot, the device map, the memory pre-flight, the allocations),
 * mrt_model_load_weights (safetensors into resident and load-only regions, the copies to each
 * device, the load-time kernels), staging of the caller's buffers, and mrt_model_destroy.
 *
 * A generated model gives an mrt_model_desc; its create/load/destroy are one-line calls here,
 * and its run() reads the mrt_model's per-slot pointers. Device policy, as PyTorch users expect
 * from model.to(device): `auto` is the first usable GPU, else the CPU, said in one line; an
 * explicit device is exactly that device or an error, never a silent fallback (field case
 * B16); a program compiled without CUDA runs `auto` on the CPU. Slots pinned by 'on' regions
 * take their device from the region, or from the device map (map_location), and their errors
 * name the region.
 */
#include "rt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the device map */

#define MAP_MAX 32

typedef struct map_entry {
    mrt_device from, to;
    int used;
} map_entry;

/* Parse "FROM=TO,FROM=TO" into e[0..*n). "" is an empty map; an empty entry anywhere (a
 * leading, doubled or trailing comma) is an error. Entries are quoted with rt_quote, so control
 * characters and over-long strings never reach a terminal raw. */
static mrt_status map_parse(const char *spec, map_entry *e, int *n)
{
    *n = 0;
    if (!*spec)
        return MRT_OK;
    const char *p = spec;
    char q[RT_QUOTE_MAX];
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[80], from[80], to[80];
        if (len == 0)
            return mrt_set_error(MRT_ERR_DEVICE, "device map %s: an empty entry; expected "
                                 "FROM=TO[,FROM=TO...] such as cuda:1=cpu,cuda:0=cuda:0",
                                 rt_quote(q, sizeof q, spec));
        if (len >= sizeof item) {
            char *cut = strndup(p, len);
            mrt_set_error(MRT_ERR_DEVICE, "device map: bad entry %s; expected FROM=TO, e.g. "
                          "cuda:1=cpu", rt_quote(q, sizeof q, cut ? cut : ""));
            free(cut);
            return MRT_ERR_DEVICE;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq || strchr(eq + 1, '=') || eq == item || !eq[1])
            return mrt_set_error(MRT_ERR_DEVICE, "device map: bad entry %s; expected FROM=TO, "
                                 "e.g. cuda:1=cpu", rt_quote(q, sizeof q, item));
        *eq = '\0';
        snprintf(from, sizeof from, "%s", item);
        snprintf(to, sizeof to, "%s", eq + 1);
        *eq = '=';
        if (*n == MAP_MAX)
            return mrt_set_error(MRT_ERR_DEVICE, "device map: more than %d entries", MAP_MAX);
        map_entry *m = &e[*n];
        int automatic = 0;
        for (int side = 0; side < 2; side++) {
            const char *sd = side ? to : from;
            if (mrt_device_parse(sd, side ? &m->to : &m->from, &automatic) != MRT_OK)
                return mrt_set_error(MRT_ERR_DEVICE, "device map entry %s: %s",
                                     rt_quote(q, sizeof q, item), mrt_last_error());
            if (automatic)
                return mrt_set_error(MRT_ERR_DEVICE, "device map entry %s: 'auto' cannot be "
                                     "mapped; name a device (cpu, cuda:N)", rt_quote(q, sizeof q, item));
        }
        for (int i = 0; i < *n; i++)
            if (e[i].from.kind == m->from.kind && e[i].from.index == m->from.index)
                return mrt_set_error(MRT_ERR_DEVICE, "device map: %s is mapped twice",
                                     rt_quote(q, sizeof q, from));
        m->used = 0;
        (*n)++;
        if (!comma)
            return MRT_OK;
        p = comma + 1;
    }
}

/* The device map given, else $MODELRT_DEVICE_MAP (its errors say so), parsed into e[0..*n). */
static mrt_status map_load(const char *device_map, map_entry *e, int *n)
{
    *n = 0;
    const char *spec = device_map ? device_map : getenv("MODELRT_DEVICE_MAP");
    mrt_status st = spec ? map_parse(spec, e, n) : MRT_OK;
    if (st != MRT_OK && !device_map)
        return mrt_set_error(st, "%s (from MODELRT_DEVICE_MAP)", mrt_last_error());
    return st;
}

/* ---------------------------------------------------------------- create and destroy */

static void graphs_free(mrt_model *m);
static size_t graphs_reserve(const mrt_model_desc *d, const mrt_device *devs, char *note, size_t note_size);

void mrt_model_destroy(mrt_model *m)
{
    if (!m)
        return;
    /* A destroy reports nothing: the caller's last error (a run's sticky CUDA fault, which makes
     * every call here fail too) must survive it. */
    char *err = strdup(mrt_last_error());
    graphs_free(m);
    rt_matmul_table_free(m->matmul);
    mrt_blk_free(m);
    mrt_model_profile(m, 0);
    int n = m->desc ? m->desc->n_slots : 0;
    for (int s = 0; s < n; s++) {
        if (m->dev[s].kind == MRT_DEVICE_CUDA && mrt_device_activate(m->dev[s]) != MRT_OK)
            continue; /* never touch a device we could not make current */
        mrt_stream_destroy(m->dev[s], m->stream[s]);
        mrt_free(m->dev[s], m->weights[s]);
        mrt_free(m->dev[s], m->load[s]);
        mrt_free(m->dev[s], m->arena[s]);
        mrt_free(m->dev[s], m->io[s]);
    }
    free(m);
    if (err)
        mrt_set_error(MRT_OK, "%s", err);
    free(err);
}

static mrt_status desc_check(const mrt_model_desc *d)
{
    if (!d)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_create: descriptor is NULL");
    if (d->abi != MRT_MODEL_ABI || d->size != sizeof(mrt_model_desc))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s' was generated for modelrt ABI %u "
                             "(descriptor of %u bytes), but this runtime has ABI %d (%zu bytes): "
                             "regenerate it with the modelc that matches this runtime",
                             d->abi == MRT_MODEL_ABI && d->name ? d->name : "?", d->abi, d->size,
                             MRT_MODEL_ABI, sizeof(mrt_model_desc));
    if (!d->name || d->n_slots < 1 || d->n_slots > MRT_MAX_SLOTS || !d->slots || d->n_params < 0 ||
        (d->n_params > 0 && !d->params))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s': malformed descriptor",
                             d->name ? d->name : "?");
    for (int s = 1; s < d->n_slots; s++)
        if (!d->slots[s].device)
            return mrt_set_error(MRT_ERR_INVALID_ARG, "model '%s': slot %d names no device",
                                 d->name, s);
    return MRT_OK;
}

/* "split.model:6: on cuda:1: " + the current error, for a pinned slot; `mapped` says which
 * device the map made of it. */
static mrt_status slot_error(const mrt_model_desc *d, int s, const char *mapped)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mrt_last_error());
    const mrt_slot_desc *sd = &d->slots[s];
    const char *hint = strstr(msg, "device-map") || strstr(msg, "bytes free") ? ""
                       : "; --device-map (or $MODELRT_DEVICE_MAP) can move it, e.g. ";
    if (mapped)
        return mrt_set_error(MRT_ERR_DEVICE, "%s: on %s (mapped to %s by the device map): %s",
                             sd->where ? sd->where : d->name, sd->device, mapped, msg);
    return mrt_set_error(MRT_ERR_DEVICE, "%s: on %s: %s%s%s%s", sd->where ? sd->where : d->name,
                         sd->device, msg, hint, *hint ? sd->device : "", *hint ? "=cpu" : "");
}

/* Slot 0: the device the caller asked for. */
static mrt_status select_main(const mrt_model_desc *d, const char *device, mrt_device *out)
{
    const char *name = device ? device : getenv("MODELRT_DEVICE");
    int automatic = !name || !*name;
    mrt_device parsed;
    if (!automatic && mrt_device_parse(name, &parsed, &automatic) != MRT_OK)
        return mrt_device_select(device, out); /* the same error, with its origin */
    if (automatic && !d->cuda) {
        /* A CPU-only program: auto is the CPU, whatever GPUs the runtime can see. */
        const char *why = NULL;
        int n = mrt_cuda_device_count(&why);
        *out = (mrt_device){MRT_DEVICE_CPU, 0};
        if (n > 0)
            mrt_log(MRT_LOG_INFO, "auto selected cpu:0 (%s was compiled without CUDA; %d CUDA "
                    "device%s visible; to use %s, build without modelc's --no-cuda, or compile %s.c with "
                    "-DMRT_WITH_CUDA and link %s.cu's object)", d->name, n, n == 1 ? "" : "s",
                    n == 1 ? "it" : "them", d->name, d->name);
        else
            mrt_log(MRT_LOG_INFO, "auto selected cpu:0 (%s was compiled without CUDA)", d->name);
        return MRT_OK;
    }
    mrt_status st = mrt_device_select(automatic ? "auto" : device, out); /* NULL: MODELRT_DEVICE */
    if (st != MRT_OK)
        return st;
    if (out->kind == MRT_DEVICE_CUDA && !d->cuda) {
        char dn[32];
        return mrt_set_error(MRT_ERR_DEVICE, "%s: device %s requested, but this program was "
                             "built without CUDA (modelc --no-cuda, or %s.c compiled without "
                             "-DMRT_WITH_CUDA); use --device cpu", d->name,
                             mrt_device_str(*out, dn, sizeof dn), d->name);
    }
    return MRT_OK;
}

static mrt_status select_pinned(const mrt_model_desc *d, int s, map_entry *map, int nmap,
                                mrt_device *out)
{
    const mrt_slot_desc *sd = &d->slots[s];
    mrt_device want;
    if (mrt_device_parse(sd->device, &want, NULL) != MRT_OK)
        return slot_error(d, s, NULL);
    const char *mapped = NULL;
    char mn[32];
    for (int i = 0; i < nmap; i++) /* applied once, to the pinned device: entries never chain */
        if (map[i].from.kind == want.kind && map[i].from.index == want.index) {
            want = map[i].to;
            map[i].used = 1;
            mapped = mrt_device_str(want, mn, sizeof mn);
            break;
        }
    char dn[32];
    if (mrt_device_select(mrt_device_str(want, dn, sizeof dn), out) != MRT_OK)
        return slot_error(d, s, mapped);
    if (out->kind == MRT_DEVICE_CUDA && !d->cuda) {
        mrt_set_error(MRT_ERR_DEVICE, "device %s requested, but this program was built without "
                      "CUDA; map it to the CPU with --device-map %s=cpu", dn, sd->device);
        return slot_error(d, s, mapped);
    }
    return MRT_OK;
}

mrt_status mrt_model_select_devices(const mrt_model_desc *d, const char *device,
                                    const char *device_map, mrt_device *devs)
{
    mrt_status st = desc_check(d);
    if (st != MRT_OK)
        return st;
    if (!devs)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_select_devices: devs is NULL");
    map_entry map[MAP_MAX];
    int nmap = 0;
    if ((st = map_load(device_map, map, &nmap)) != MRT_OK)
        return st;
    if ((st = select_main(d, device, &devs[0])) != MRT_OK)
        return st;
    for (int s = 1; s < d->n_slots; s++)
        if ((st = select_pinned(d, s, map, nmap, &devs[s])) != MRT_OK)
            return st;
    for (int i = 0; i < nmap; i++)
        if (!map[i].used) {
            char f[32];
            mrt_log(MRT_LOG_INFO, "device map: %s pins no region to %s; the entry is unused",
                    d->name, mrt_device_str(map[i].from, f, sizeof f));
        }
    /* The memory pre-flight: each GPU must have room for everything the plan puts there, summed
     * over the slots that share it, the library workspaces, and the executable CUDA graphs the
     * run will keep (graphs_reserve). `auto` falls back to the CPU with a warning; an explicit or
     * pinned device is an error. */
    const char *name = device ? device : getenv("MODELRT_DEVICE");
    int is_auto = !name || !*name || !strcmp(name, "auto");
    for (int s = 0; s < d->n_slots; s++) {
        if (devs[s].kind != MRT_DEVICE_CUDA)
            continue;
        int first = 1, last = s;
        size_t need = 0;
        for (int t = 0; t < d->n_slots; t++)
            if (devs[t].kind == MRT_DEVICE_CUDA && devs[t].index == devs[s].index) {
                const mrt_slot_desc *sd = &d->slots[t];
                need += sd->weight_bytes + sd->load_bytes + sd->arena_bytes[1] + sd->io_bytes +
                        rt_cuda_workspace_bytes(devs[t].index);
                first &= t >= s;
                last = t;
            }
        if (!first)
            continue; /* checked with the first slot on this device */
        char gn[128] = ""; /* the graphs are instantiated on slot 0's device */
        need += s == 0 ? graphs_reserve(d, devs, gn, sizeof gn) : 0;
        size_t free_b = 0, total_b = 0;
        char dn[32];
        mrt_device_str(devs[s], dn, sizeof dn);
        if ((st = mrt_device_memory(devs[s], &free_b, &total_b)) != MRT_OK)
            return s ? slot_error(d, s, NULL) : st;
        if (need <= free_b)
            continue;
        if (s == 0 && is_auto) {
            mrt_log(MRT_LOG_WARN, "%s: %s has %zu bytes free, the model needs %zu; running on cpu:0 "
                    "instead", d->name, dn, free_b, need);
            devs[0] = (mrt_device){MRT_DEVICE_CPU, 0};
            s = -1; /* check the GPUs again without slot 0 */
            continue;
        }
        const mrt_slot_desc *sd = &d->slots[s];
        mrt_set_error(MRT_ERR_OOM, "%s: %s has %zu bytes free (of %zu), the model needs %zu there "
                      "(%s%zu weights, %zu load-time, %zu activations, %zu staging, %zu cuBLAS workspace%s)",
                      d->name, dn, free_b, total_b, need, last != s ? "over its slots; this slot: " : "",
                      sd->weight_bytes, sd->load_bytes, sd->arena_bytes[1], sd->io_bytes,
                      rt_cuda_workspace_bytes(devs[s].index), gn);
        return s ? slot_error(d, s, NULL) : MRT_ERR_OOM;
    }
    return MRT_OK;
}

mrt_status mrt_model_requested_devices(const mrt_model_desc *d, const char *device,
                                       const char *device_map, mrt_device *devs)
{
    mrt_status st = desc_check(d);
    if (st != MRT_OK)
        return st;
    map_entry map[MAP_MAX];
    int nmap = 0, automatic = 0;
    if ((st = map_load(device_map, map, &nmap)) != MRT_OK)
        return st;
    const char *name = device ? device : getenv("MODELRT_DEVICE");
    if (name && *name && mrt_device_parse(name, &devs[0], &automatic) != MRT_OK)
        return mrt_device_select(device, &devs[0]); /* the same error, with its origin */
    if (!name || !*name || automatic)
        devs[0] = (mrt_device){MRT_DEVICE_CPU, 0};
    for (int s = 1; s < d->n_slots; s++) {
        if (mrt_device_parse(d->slots[s].device, &devs[s], NULL) != MRT_OK)
            devs[s] = (mrt_device){MRT_DEVICE_CPU, 0};
        for (int i = 0; i < nmap; i++)
            if (map[i].from.kind == devs[s].kind && map[i].from.index == devs[s].index) {
                devs[s] = map[i].to;
                break;
            }
    }
    return MRT_OK;
}

mrt_status mrt_model_create(mrt_model **out, const mrt_model_desc *d, const char *device,
                            const char *device_map)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_create: out is NULL");
    *out = NULL;
    mrt_device devs[MRT_MAX_SLOTS];
    mrt_status st = mrt_model_select_devices(d, device, device_map, devs);
    return st != MRT_OK ? st : mrt_model_create_on(out, d, devs);
}

mrt_status mrt_model_create_on(mrt_model **out, const mrt_model_desc *d, const mrt_device *devs)
{
    if (!out)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_create_on: out is NULL");
    *out = NULL;
    mrt_status st = desc_check(d);
    if (st != MRT_OK)
        return st;
    mrt_model *m = calloc(1, sizeof *m);
    if (!m)
        return mrt_set_error(MRT_ERR_OOM, "%s: out of memory (%zu bytes)", d->name, sizeof *m);
    m->desc = d;
    m->train = d->train;
    memcpy(m->dev, devs, sizeof(mrt_device) * (size_t)d->n_slots);
    for (int s = 0; s < d->n_slots && st == MRT_OK; s++) {
        mrt_device dv = m->dev[s];
        const mrt_slot_desc *sd = &d->slots[s];
        int cuda = dv.kind == MRT_DEVICE_CUDA;
        if ((st = mrt_device_activate(dv)) != MRT_OK || (st = mrt_stream_create(dv, &m->stream[s])) != MRT_OK)
            break;
        m->weights[s] = mrt_alloc(dv, sd->weight_bytes);
        m->arena[s] = mrt_alloc(dv, sd->arena_bytes[cuda]);
        if (cuda)
            m->io[s] = mrt_alloc(dv, sd->io_bytes);
        if (!m->weights[s] || !m->arena[s] || (cuda && !m->io[s]))
            st = MRT_ERR_OOM; /* mrt_alloc named the bytes and the device */
        void *ws;
        if (st == MRT_OK && cuda && rt_fake_cuda_count(NULL) < 0) /* the pre-flight counted it */
            st = rt_cuda_workspace(dv.index, m->stream[s], &ws);
    }
    if (st == MRT_OK)
        st = mrt_device_activate(m->dev[0]);
    if (st != MRT_OK) {
        mrt_model_destroy(m);
        return st;
    }
    m->weights_loaded = d->n_params == 0 && !d->init;
    *out = m;
    return MRT_OK;
}

/* ---------------------------------------------------------------- weights */

/* After the params are in place (st == MRT_OK): the load-time kernels, then the load-only
 * regions (raw params that only folding reads) are freed, then the blocked convolutions'
 * primitives are made. */
static mrt_status weights_finish(mrt_model *m, mrt_status st)
{
    const mrt_model_desc *d = m->desc;
    if (st == MRT_OK)
        rt_precision_notice(m); /* --precision bf16 where it runs in f32 (a GPU, a CPU without bf16) */
    if (st == MRT_OK && d->init)
        st = d->init(m);
    for (int s = 0; s < d->n_slots; s++) {
        if (m->dev[s].kind == MRT_DEVICE_CUDA && mrt_device_activate(m->dev[s]) != MRT_OK)
            continue;
        mrt_free(m->dev[s], m->load[s]);
        m->load[s] = NULL;
    }
    /* the blocked convolutions' reordered weights after the load-only region is gone: the two
     * are never resident together (it reads only the weight region) */
    if (st == MRT_OK && d->blocked && m->dev[0].kind == MRT_DEVICE_CPU)
        st = d->blocked(m);
    if (st == MRT_OK)
        st = mrt_device_activate(m->dev[0]);
    if (st != MRT_OK)
        return st;
    m->weights_loaded = 1;
    return MRT_OK;
}

mrt_status mrt_model_load_weights(mrt_model *m, const char *path)
{
    if (!m || !m->desc)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_load_weights: model is NULL");
    const mrt_model_desc *d = m->desc;
    if (!path && d->n_params > 0)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s_load_weights: path is NULL", d->name);
    const int nr = 2 * d->n_slots;
    void *host[2 * MRT_MAX_SLOTS] = {0};
    size_t bytes[2 * MRT_MAX_SLOTS] = {0};
    const mrt_device cpu = {MRT_DEVICE_CPU, 0};
    mrt_status st = MRT_OK;
    m->weights_loaded = 0;
    for (int s = 0; s < d->n_slots && st == MRT_OK; s++) {
        const mrt_slot_desc *sd = &d->slots[s];
        int cuda = m->dev[s].kind == MRT_DEVICE_CUDA;
        bytes[2 * s] = sd->weight_bytes;
        bytes[2 * s + 1] = sd->load_bytes;
        if ((st = mrt_device_activate(m->dev[s])) != MRT_OK)
            break;
        mrt_free(m->dev[s], m->load[s]);
        m->load[s] = mrt_alloc(m->dev[s], sd->load_bytes);
        if (!m->load[s]) {
            st = MRT_ERR_OOM;
            break;
        }
        /* On the CPU the file is read straight into place; a GPU slot reads into host memory
         * and copies once. */
        host[2 * s] = cuda ? malloc(sd->weight_bytes ? sd->weight_bytes : 1) : m->weights[s];
        host[2 * s + 1] = cuda ? malloc(sd->load_bytes ? sd->load_bytes : 1) : m->load[s];
        if (!host[2 * s] || !host[2 * s + 1])
            st = mrt_set_error(MRT_ERR_OOM, "%s_load_weights: cannot allocate %zu bytes of host "
                               "memory", d->name, sd->weight_bytes + sd->load_bytes);
    }
    if (st == MRT_OK && d->n_params > 0)
        st = mrt_weights_load_regions(path, d->params, d->n_params, host, bytes, nr);
    for (int s = 0; s < d->n_slots && st == MRT_OK; s++) {
        if (m->dev[s].kind != MRT_DEVICE_CUDA)
            continue;
        if ((st = mrt_device_activate(m->dev[s])) == MRT_OK &&
            (st = mrt_memcpy(m->dev[s], m->weights[s], cpu, host[2 * s], bytes[2 * s],
                             m->stream[s])) == MRT_OK &&
            (st = mrt_memcpy(m->dev[s], m->load[s], cpu, host[2 * s + 1], bytes[2 * s + 1],
                             m->stream[s])) == MRT_OK)
            st = mrt_stream_sync(m->dev[s], m->stream[s], "load_weights");
    }
    for (int s = 0; s < d->n_slots; s++)
        if (m->dev[s].kind == MRT_DEVICE_CUDA) {
            free(host[2 * s]);
            free(host[2 * s + 1]);
        }
    return weights_finish(m, st);
}

mrt_status mrt_model_copy_weights(mrt_model *dst, const mrt_model *src)
{
    if (!dst || !dst->desc || !src || !src->desc)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_copy_weights: a model is NULL");
    const mrt_model_desc *d = dst->desc, *sd = src->desc;
    if (!src->weights_loaded)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: copying the weights of '%s', which has none loaded", d->name,
                             sd->name);
    for (int i = 0; i < d->n_params; i++) /* first: no setting at load time brings these back */
        for (int j = 0; j < sd->n_params; j++)
            if (sd->params[j].region % 2 && !sd->params[j].state == !d->params[i].state &&
                !strcmp(sd->params[j].name, d->params[i].name))
                return mrt_set_error(MRT_ERR_MISMATCH, "%s: param '%s' is not kept after loading in '%s' (load the "
                                     "weights file instead)", d->name, d->params[i].name, sd->name);
    if (mrt_blk_released(src))
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: copying the weights of '%s', whose blocked convolutions released "
                             "their plain weights after loading (load the weights file instead, or set "
                             "MODELRT_KEEP_WEIGHTS=1)", d->name, sd->name);
    if (rt_matmul_packed(src)) /* its params buffer is not plain (MRT_MATMUL_PACK) */
        return mrt_set_error(MRT_ERR_INVALID_ARG, "%s: copying the weights of '%s', some of whose GEMMs hold their weights "
                             "packed in place after loading (load the weights file instead, or set MODELRT_PACK_WEIGHTS=0)",
                             d->name, sd->name);
    mrt_status st = MRT_OK;
    dst->weights_loaded = 0;
    for (int s = 0; s < d->n_slots && st == MRT_OK; s++) {
        if ((st = mrt_device_activate(dst->dev[s])) != MRT_OK)
            break;
        mrt_free(dst->dev[s], dst->load[s]);
        if (!(dst->load[s] = mrt_alloc(dst->dev[s], d->slots[s].load_bytes)))
            st = MRT_ERR_OOM;
    }
    for (int i = 0; i < d->n_params && st == MRT_OK; i++) {
        const mrt_param_desc *p = &d->params[i], *q = NULL;
        for (int j = 0; j < sd->n_params && !q; j++)
            if (!sd->params[j].state == !p->state && !strcmp(sd->params[j].name, p->name))
                q = &sd->params[j];
        int same = q && q->dtype == p->dtype && q->rank == p->rank && !(q->region % 2);
        for (int k = 0; same && k < p->rank; k++)
            same = q->shape[k] == p->shape[k];
        if (!same) {
            st = mrt_set_error(MRT_ERR_MISMATCH, "%s: param '%s' is %s in '%s'", d->name, p->name,
                               !q ? "absent" : q->region % 2 ? "not kept after loading" : "of another dtype or shape",
                               sd->name);
            break;
        }
        uint64_t numel = 1;
        rt_shape_numel(p->shape, p->rank, &numel);
        int s = p->region / 2, t = q->region / 2;
        unsigned char *to = (p->region % 2 ? dst->load[s] : dst->weights[s]) + p->offset;
        st = mrt_memcpy(dst->dev[s], to, src->dev[t], src->weights[t] + q->offset, (size_t)numel * mrt_dtype_size(p->dtype),
                        src->dev[t].kind == MRT_DEVICE_CUDA ? src->stream[t] : dst->stream[s]);
    }
    for (int s = 0; s < sd->n_slots && st == MRT_OK; s++)
        if (src->dev[s].kind == MRT_DEVICE_CUDA)
            st = mrt_stream_sync(src->dev[s], src->stream[s], "copy_weights");
    for (int s = 0; s < d->n_slots && st == MRT_OK; s++)
        if (dst->dev[s].kind == MRT_DEVICE_CUDA)
            st = mrt_stream_sync(dst->dev[s], dst->stream[s], "copy_weights");
    return weights_finish(dst, st);
}

/* ---------------------------------------------------------------- staging */

/* Whether the caller's buffer p is used in place on `slot`: on a CPU slot, or when p is in that
 * GPU's memory; another GPU's memory is an error naming the tensor. */
static mrt_status stage_in_place(const mrt_model *m, int slot, const void *p, const char *what, const char *name,
                                 int *in_place)
{
    mrt_device pd, d = m->dev[slot];
    *in_place = 1;
    if (d.kind != MRT_DEVICE_CUDA)
        return MRT_OK;
    mrt_status st = mrt_pointer_device(p, &pd);
    if (st != MRT_OK)
        return st;
    if (pd.kind != MRT_DEVICE_CUDA) {
        *in_place = 0;
        return MRT_OK;
    }
    if (pd.index != d.index)
        return mrt_set_error(MRT_ERR_DEVICE, "%s_run: %s '%s' is in cuda:%d memory, but it is %s on cuda:%d",
                             m->desc->name, what, name, pd.index, !strcmp(what, "input") ? "read" : "computed",
                             d.index);
    return MRT_OK;
}

mrt_status mrt_model_stage_in(mrt_model *m, int slot, const void *p, size_t bytes, size_t off,
                              const void **use, const char *name)
{
    int in_place;
    mrt_status st = stage_in_place(m, slot, p, "input", name, &in_place);
    *use = p;
    if (st != MRT_OK || in_place)
        return st;
    void *dst = m->io[slot] + off;
    *use = dst;
    return mrt_memcpy(m->dev[slot], dst, (mrt_device){MRT_DEVICE_CPU, 0}, p, bytes, m->stream[slot]);
}

mrt_status mrt_model_stage_out(mrt_model *m, int slot, void *p, size_t off, void **use, int *back,
                               const char *name)
{
    int in_place;
    mrt_status st = stage_in_place(m, slot, p, "output", name, &in_place);
    *use = in_place ? p : m->io[slot] + off;
    *back = !in_place;
    return st;
}

/* ---------------------------------------------------------------- CUDA graphs */

/* The graphs of a model's run (mrt_model_graph_begin in modelrt.h): the last RT_GRAPHS keys,
 * each with its executable graph and what the host keeps of the checks the run queues on each
 * slot's stream. A run over several GPU slots is captured on slot 0's stream, which forks into
 * the other slots' streams and joins them back (mrt_stream_wait: an event each way), so that
 * one graph, launched on slot 0's stream, holds every slot's work and the copies between them. */
#define RT_GRAPHS 4
/* The device memory the pre-flight reserves per executable graph. An estimate: what the driver
 * allocates at instantiation (its nodes' launch parameters and descriptors) is undocumented
 * and grows with the nodes; 8 MiB holds about a thousand kernel nodes at 8 KiB each, the
 * simulator's charge (tests/cudasim: graph_charge, 64 KiB and 8 KiB a node in 2 MiB pages). */
#define RT_GRAPH_BYTES ((size_t)8 << 20)

typedef struct {
    int64_t *key;
    int nkey;
    void *exec;
    void *checks[MRT_MAX_SLOTS];
    unsigned long long used;
} rt_graph;

typedef struct {
    int warm;      /* an eager run completed: handles, plans and check records exist */
    int off;       /* never again: a run could not be captured */
    int capturing; /* between mrt_model_graph_begin and _end */
    int64_t *key;  /* the key being captured */
    int nkey;
    unsigned long long tick;
    rt_graph g[RT_GRAPHS];
} rt_graphs;

/* Graphs for this model's runs: not turned off, every slot a (real) GPU, no wait after each
 * launch. */
static int graphs_wanted(const mrt_model *m)
{
    if (m->prof) /* a profiled run times each kernel eagerly (rt_prof.c) */
        return 0;
    static int env = -1; /* MODELRT_CUDA_GRAPHS, read once */
    if (env < 0) {
        env = rt_env_flag("MODELRT_CUDA_GRAPHS", 1);
    }
    if (!env || rt_fake_cuda_count(NULL) >= 0 || rt_cuda_sync_each()) /* MODELRT_CUDA_SYNC=1: nothing to capture */
        return 0;
    for (int s = 0; s < m->desc->n_slots; s++)
        if (m->dev[s].kind != MRT_DEVICE_CUDA)
            return 0;
    return 1;
}

/* Every pair of the slots' GPUs can copy directly (a staged copy waits on the host). */
static int graphs_peers(const mrt_model *m)
{
    for (int s = 0; s < m->desc->n_slots; s++)
        for (int t = 0; t < m->desc->n_slots; t++)
            if (m->dev[s].index != m->dev[t].index && !rt_cuda_peer_access(m->dev[s].index, m->dev[t].index))
                return 0;
    return 1;
}

/* Slot 0's stream waits for the work queued so far on every other slot's stream (before a
 * capture or a launch: their staged inputs; before the capture ends: the join), or, with
 * `fork`, every other slot's stream waits for slot 0's (the fork into a capture; after a
 * launch: their copies back and synchronizations). The host does not wait. */
static mrt_status graphs_streams_wait(mrt_model *m, int fork)
{
    mrt_status st = MRT_OK;
    for (int s = 1; s < m->desc->n_slots && st == MRT_OK; s++)
        st = fork ? mrt_stream_wait(m->dev[s], m->stream[s], m->dev[0], m->stream[0], m->desc->name)
                  : mrt_stream_wait(m->dev[0], m->stream[0], m->dev[s], m->stream[s], m->desc->name);
    return st;
}

/* The run cannot be a CUDA graph (`why`): the capture, if one is open, ends and is dropped with
 * the check records it queued (their kernels ran nowhere), and graphs go off for the model. */
static void graphs_give_up(mrt_model *m, const char *why)
{
    rt_graphs *G = m->graphs;
    char reason[512];
    snprintf(reason, sizeof reason, "%s", why);
    if (G->capturing) {
        (void)graphs_streams_wait(m, 0); /* joined back, so that the capture can end (fails once invalidated) */
        rt_cuda_graph_abort(m->dev[0].index, m->stream[0]);
        G->capturing = 0;
    }
    for (int s = 0; s < m->desc->n_slots; s++)
        rt_cuda_checks_drop(m->dev[s].index, m->stream[s]);
    G->off = 1;
    mrt_log(MRT_LOG_WARN, "%s: the run cannot be a CUDA graph (%s); running without graphs", m->desc->name, reason);
}

/* What the memory pre-flight counts for the run's CUDA graphs on devs: RT_GRAPHS graphs of
 * RT_GRAPH_BYTES when graphs_wanted would capture this model there (asked of a model that
 * has only the descriptor and the devices), else 0; `note` gets the term of the pre-flight's
 * message (", N CUDA graphs (...)", or ""). */
static size_t graphs_reserve(const mrt_model_desc *d, const mrt_device *devs, char *note, size_t note_size)
{
    mrt_model probe;
    memset(&probe, 0, sizeof probe);
    probe.desc = d;
    for (int s = 0; s < d->n_slots; s++) /* every slot: a model split over GPUs is one graph too */
        probe.dev[s] = devs[s];
    size_t bytes = graphs_wanted(&probe) && graphs_peers(&probe) ? (size_t)RT_GRAPHS * RT_GRAPH_BYTES : 0;
    if (bytes)
        snprintf(note, note_size, ", %zu CUDA graphs (up to %d of %zu; MODELRT_CUDA_GRAPHS=0 runs without)", bytes,
                 RT_GRAPHS, RT_GRAPH_BYTES);
    else
        note[0] = '\0';
    return bytes;
}

static void graphs_free(mrt_model *m)
{
    rt_graphs *G = m->graphs;
    if (!G)
        return;
    if (G->capturing)
        rt_cuda_graph_abort(m->dev[0].index, m->stream[0]);
    for (int i = 0; i < RT_GRAPHS; i++) {
        rt_cuda_graph_destroy(m->dev[0].index, G->g[i].exec);
        free(G->g[i].key);
        for (int s = 0; s < MRT_MAX_SLOTS; s++)
            free(G->g[i].checks[s]);
    }
    free(G->key);
    free(G);
    m->graphs = NULL;
}

mrt_status mrt_model_graph_begin(mrt_model *m, const int64_t *key, int nkey, int *replayed)
{
    *replayed = 0;
    if (m->pipe || !graphs_wanted(m)) /* a micro-batch of a pipeline runs eagerly (rt_pipe.c) */
        return MRT_OK;
    rt_graphs *G = m->graphs;
    if (!G) {
        if (!(G = m->graphs = calloc(1, sizeof *G)))
            return mrt_set_error(MRT_ERR_OOM, "%s: out of memory for its CUDA graphs", m->desc->name);
        G->off = !graphs_peers(m); /* GPUs without peer access copy through the host: eager */
    }
    int ns = m->desc->n_slots, dev = m->dev[0].index;
    void *stream = m->stream[0];
    if (G->capturing) /* a run left its capture open (it returned between begin and end) */
        graphs_give_up(m, "the last run stopped during its capture");
    int pending = 0;
    for (int s = 0; s < ns; s++) {
        int p = rt_cuda_checks_pending(m->dev[s].index, m->stream[s]);
        G->off |= p < 0; /* records overflowed: a run synchronizes the host in its middle */
        pending |= p != 0;
    }
    if (G->off || !G->warm || pending) /* the last run's checks not read yet */
        return MRT_OK;
    G->tick++;
    for (int i = 0; i < RT_GRAPHS; i++) {
        rt_graph *g = &G->g[i];
        if (g->exec && g->nkey == nkey && !memcmp(g->key, key, sizeof *key * (size_t)nkey)) {
            g->used = G->tick;
            for (int s = 0; s < ns; s++)
                rt_cuda_checks_restore(m->dev[s].index, m->stream[s], g->checks[s]);
            mrt_status st = graphs_streams_wait(m, 0);
            if (st == MRT_OK)
                st = rt_cuda_graph_launch(dev, stream, g->exec);
            if (st == MRT_OK)
                st = graphs_streams_wait(m, 1);
            *replayed = st == MRT_OK;
            return st;
        }
    }
    free(G->key);
    if (!(G->key = malloc(sizeof *key * (size_t)(nkey ? nkey : 1))))
        return mrt_set_error(MRT_ERR_OOM, "%s: out of memory for its CUDA graphs", m->desc->name);
    memcpy(G->key, key, sizeof *key * (size_t)nkey);
    G->nkey = nkey;
    mrt_status st = graphs_streams_wait(m, 0);
    if (st == MRT_OK)
        st = rt_cuda_graph_begin(dev, stream);
    G->capturing = st == MRT_OK;
    if (G->capturing && graphs_streams_wait(m, 1) != MRT_OK) /* the fork */
        graphs_give_up(m, mrt_last_error());
    return st;
}

mrt_status mrt_model_graph_end(mrt_model *m, mrt_status st, int *again)
{
    *again = 0;
    rt_graphs *G = m->graphs;
    if (!G || !G->capturing) {
        if (G && st == MRT_OK)
            G->warm = 1;
        return st; /* an eager run: its error, if any */
    }
    if (st != MRT_OK) { /* a call failed during the capture: nothing ran; again, eagerly */
        graphs_give_up(m, mrt_last_error());
        *again = 1;
        return MRT_OK;
    }
    int dev = m->dev[0].index;
    void *stream = m->stream[0];
    rt_graph *g = &G->g[0];
    for (int i = 1; i < RT_GRAPHS; i++) /* an empty entry, else the least recently used */
        if (g->exec && (!G->g[i].exec || G->g[i].used < g->used))
            g = &G->g[i];
    free(g->key);
    g->key = NULL;
    for (int s = 0; s < MRT_MAX_SLOTS; s++) {
        free(g->checks[s]);
        g->checks[s] = NULL;
    }
    st = graphs_streams_wait(m, 0); /* the join */
    if (st == MRT_OK)
        st = rt_cuda_graph_end(dev, stream, &g->exec); /* ends the capture; updates g->exec when it can */
    if (st != MRT_OK) { /* the join, capture, instantiation or launch failed: nothing ran; again, eagerly */
        rt_cuda_graph_destroy(dev, g->exec);
        g->exec = NULL;
        graphs_give_up(m, mrt_last_error()); /* ends the capture if it is still open */
        *again = 1;
        return MRT_OK;
    }
    G->capturing = 0;
    g->key = G->key;
    g->nkey = G->nkey;
    g->used = G->tick;
    for (int s = 0; s < m->desc->n_slots; s++)
        g->checks[s] = rt_cuda_checks_save(m->dev[s].index, m->stream[s]);
    G->key = NULL;
    return graphs_streams_wait(m, 1); /* the other slots' later work waits for the graph */
}

/* ---------------------------------------------------------------- memory */

mrt_status mrt_model_plan_memory(const mrt_model_desc *d, const mrt_device *devs, int slot,
                                 mrt_memory_use *out)
{
    if (!d || !devs || !out || slot < 0 || slot >= d->n_slots)
        return mrt_set_error(MRT_ERR_INVALID_ARG, "mrt_model_plan_memory: bad descriptor or slot %d",
                             slot);
    const mrt_slot_desc *sd = &d->slots[slot];
    int cuda = devs[slot].kind == MRT_DEVICE_CUDA;
    out->device = devs[slot];
    out->weights = sd->weight_bytes;
    out->load_only = sd->load_bytes;
    out->arena = sd->arena_bytes[cuda];
    out->scratch = cuda ? sd->io_bytes : 0;
    out->total = out->weights + out->arena + out->scratch;
    return MRT_OK;
}
