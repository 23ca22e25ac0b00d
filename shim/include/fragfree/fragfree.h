/* fragfree: a CUDA caching allocator on the driver's virtual memory API.
 * The public C API. Every function is thread-safe and never throws; errors come
 * back as ff_status_t (or NULL), with a message from ff_last_error() and
 * through the handler set with ff_set_error_handler (default: print to stderr).
 * Configuration: FRAGFREE_CONF (PYTORCH_CUDA_ALLOC_CONF syntax), or
 * ff_init(conf). Streams are cudaStream_t values passed as void*; on the host
 * backend (FRAGFREE_CONF=backend:host) they are opaque tags. */
#ifndef FRAGFREE_FRAGFREE_H_
#define FRAGFREE_FRAGFREE_H_

#include <stddef.h>
#include <stdint.h>

#include "fragfree/stat_fields.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FF_API __attribute__((visibility("default")))

typedef void* ff_stream_t;

/* The `device` argument: a device index (0, 1, ...), or one of these. They are
 * all -1 (the value every function has always taken), so each function
 * accepts the one its comment names and gives -1 that meaning:
 *  - FF_DEVICE_OWNER: the device whose allocator owns the pointer passed
 *    (ff_free, ff_record_stream, ff_allocation_size);
 *  - FF_DEVICE_ALL: every device fragfree serves (ff_empty_cache,
 *    ff_set_memory_fraction, ff_set_memory_limit, ff_reset_peak_stats,
 *    ff_reset_accumulated_stats, ff_check_invariants, ff_record_history,
 *    ff_paused_json, ff_ipc_sweep);
 *  - FF_DEVICE_DEFAULT: device 0, for the functions that describe one device
 *    (ff_get_stats, ff_stats_json, ff_snapshot_json, ff_bucket_advice_json,
 *    ff_dump_snapshot).
 * ff_malloc and ff_set_oom_hints take a device index only. */
#define FF_DEVICE_OWNER (-1)
#define FF_DEVICE_ALL (-1)
#define FF_DEVICE_DEFAULT (-1)

typedef enum ff_status_t {
  FF_OK = 0,
  FF_ERR_INVALID_ARGUMENT = 1, /* bad pointer, bad size, double free, bad key */
  FF_ERR_OOM = 2,              /* out of memory after every reclaim */
  FF_ERR_NO_DEVICE = 3,        /* no such device, or no CUDA driver */
  FF_ERR_STATE = 4,            /* wrong time: after shutdown, during capture */
  FF_ERR_BACKEND = 5,          /* the CUDA driver (or host emulation) failed */
  FF_ERR_INTERNAL = 6
} ff_status_t;

typedef void (*ff_error_handler_t)(ff_status_t status, const char* message,
                                   void* arg);

typedef struct ff_stat_t {
  int64_t current, peak, allocated, freed;
} ff_stat_t;

/* Statistics of one device; keys as torch.cuda.memory_stats() (docs/stats.md).
 * The fields come from the lists in fragfree/stat_fields.h, which also pins
 * their layout (every offset and the size) for FF_STATS_VERSION: a field added
 * anywhere but at the end of the struct fails fragfree's build, and a new
 * layout needs a new version. */
typedef struct ff_stats_t {
  uint32_t size;    /* sizeof(ff_stats_t), set by the caller */
  uint32_t version; /* FF_STATS_VERSION, set by fragfree */
#define FF_C_ARRAY(name) ff_stat_t name[3]; /* all, small_pool, large_pool */
  FF_STAT_ARRAY_FIELDS(FF_C_ARRAY)
#undef FF_C_ARRAY
#define FF_C_STAT(name) ff_stat_t name;
  FF_STAT_FIELDS(FF_C_STAT)
#undef FF_C_STAT
#define FF_C_COUNTER(name) int64_t name;
  FF_COUNTER_FIELDS(FF_C_COUNTER)
  FF_GAUGE_FIELDS(FF_C_COUNTER)
#undef FF_C_COUNTER
  double u_alloc;                /* peak allocated / peak reserved */
  double u_active;               /* peak active / peak reserved */
  double external_fragmentation; /* 1 - largest free / total free */
#define FF_C_COUNTER(name) int64_t name;
  /* version 2: sleep and wake (docs/sleep.md); version 3 appended
   * kept_backup_bytes */
  FF_SLEEP_FIELDS(FF_C_COUNTER)
  /* version 4: where the time goes (docs/stats.md); version 5 appended
   * move_ns and move_budget_pages, version 6 large_page_size */
  FF_TIMING_FIELDS(FF_C_COUNTER)
#undef FF_C_COUNTER
} ff_stats_t;

/* Initialise with a configuration string (NULL: FRAGFREE_CONF). Optional: the
 * first call of any function initialises from FRAGFREE_CONF. An error once
 * devices are in use, or for a bad key. */
FF_API ff_status_t ff_init(const char* conf);
/* Frees every device's memory; later calls fail with FF_ERR_STATE. */
FF_API ff_status_t ff_shutdown(void);
FF_API const char* ff_version(void);
FF_API int ff_device_count(void);

/* NULL for size 0 (not an error) and on failure (with the handler called).
 * device: an index (a negative one is FF_ERR_INVALID_ARGUMENT). A request that
 * fails leaves the device's memory as it was: the pages fragfree created, moved
 * or mapped while trying are given back first. */
FF_API void* ff_malloc(size_t size, int device, ff_stream_t stream);
/* device: an index, or FF_DEVICE_OWNER to find the device that owns ptr. NULL
 * is a no-op. */
FF_API ff_status_t ff_free(void* ptr, int device);
/* ptr (live) is also used by work on `stream`: its memory is reused only after
 * that work completes. device: an index, or FF_DEVICE_OWNER to find the device
 * that owns ptr (FF_ERR_INVALID_ARGUMENT if no device does). */
FF_API ff_status_t ff_record_stream(void* ptr, int device, ff_stream_t stream);
/* Call before destroying a stream fragfree allocated on (cudaStreamDestroy):
 * waits for the work issued on it and forgets the handle, on every device. */
FF_API ff_status_t ff_retire_stream(ff_stream_t stream);
/* device: an index, or FF_DEVICE_ALL (every device in use). */
FF_API ff_status_t ff_empty_cache(int device);
/* device: an index, or FF_DEVICE_ALL (every device in use). */
FF_API ff_status_t ff_set_memory_fraction(double fraction, int device);
/* bytes == 0 removes the byte limit. device: an index, or FF_DEVICE_ALL. */
FF_API ff_status_t ff_set_memory_limit(size_t bytes, int device);
/* device: an index, or FF_DEVICE_DEFAULT (device 0). A device fragfree has not
 * served reports zeros. */
FF_API ff_status_t ff_get_stats(int device, ff_stats_t* out);
/* ff_get_stats without the device's free and total memory, which ff_get_stats
 * asks the driver for (one call of several microseconds, more right after a
 * synchronise): device_free_bytes and device_total_bytes are 0, every other
 * field as ff_get_stats. What torch.cuda.memory_stats() and memory_allocated()
 * need; PyTorch's own allocator makes no driver call for them either. */
FF_API ff_status_t ff_get_allocator_stats(int device, ff_stats_t* out);
/* One integer figure of the stats by its ff_stats_json key (e.g.
 * "allocated_bytes.all.current", "reserved_bytes.all.peak", "num_ooms") into
 * *value, read as ff_get_allocator_stats reads it (no driver call, but for the
 * keys device_free_bytes and device_total_bytes) and without writing the JSON:
 * what torch.cuda.memory_allocated() and its kind need. device: an index, or
 * FF_DEVICE_DEFAULT (device 0); a device fragfree has not served reports 0.
 * FF_ERR_INVALID_ARGUMENT for a NULL argument or a key that names no integer
 * figure (the "fragmentation." keys are computed: read them from the JSON). */
FF_API ff_status_t ff_get_stat(int device, const char* key, int64_t* value);
/* Writes the stats as one JSON object (memory_stats() keys) into buf; returns
 * the length the full text needs (excluding the NUL), or 0 on error. device:
 * an index, or FF_DEVICE_DEFAULT (device 0). */
FF_API size_t ff_stats_json(int device, char* buf, size_t len);
/* device: an index, or FF_DEVICE_ALL. */
FF_API ff_status_t ff_reset_peak_stats(int device);
/* device: an index, or FF_DEVICE_ALL. */
FF_API ff_status_t ff_reset_accumulated_stats(int device);
/* Requested size of a live allocation, 0 if ptr is not one. device: an index,
 * or FF_DEVICE_OWNER (any device). */
FF_API size_t ff_allocation_size(const void* ptr, int device);
/* The device's state as a torch.cuda.memory._snapshot()-shaped JSON object
 * ({"segments": [...], "device_traces": [...]}); returns the full length
 * (excluding the NUL) like ff_stats_json, or 0 on error. device: an index, or
 * FF_DEVICE_DEFAULT (device 0). */
FF_API size_t ff_snapshot_json(int device, char* buf, size_t len);
/* The bucket advisor (docs/oom.md): the num_buckets rounding buckets that
 * minimise padding for the request sizes the device has seen (sampled 1 in
 * bucket_sample requests), as one JSON object: "buckets" (bytes, ascending),
 * "conf" ("round_buckets:[...]", ready for FRAGFREE_CONF; "" before any
 * request), the padding and distinct block sizes with the advised buckets,
 * PyTorch's default rounding and roundup_power2_divisions:4, and the
 * histogram's figures. num_buckets <= 0: the bucket_advice_k option; above
 * 256: an error. device: an index, or FF_DEVICE_DEFAULT (device 0). Returns the
 * full length (excluding the NUL), like ff_stats_json, or 0 on error. */
FF_API size_t ff_bucket_advice_json(int device, int num_buckets, char* buf,
                                    size_t len);
/* The same programme on sequence lengths, for a data loader: the num_buckets
 * (1 to 256) lengths, multiples of multiple_of (>= 1), that minimise padding
 * tokens when each sequence is padded to the smallest length that holds it.
 * JSON: "lengths", "sequences_per_bucket", "sequences", "tokens",
 * "padding_tokens", "pad_to_max_padding_tokens". Negative lengths are an
 * error. Returns the full length like ff_stats_json, or 0 on error. */
FF_API size_t ff_advise_sequence_buckets_json(const int64_t* lengths, size_t n,
                                              int num_buckets, int multiple_of,
                                              char* buf, size_t len);
/* Writes the device's snapshot to `path`: a pickle that PyTorch's memory viewer
 * opens (python -m torch.cuda._memory_viz trace_plot path -o plot.html), or
 * JSON when the path ends in ".json". device: an index, or FF_DEVICE_DEFAULT
 * (device 0). */
FF_API ff_status_t ff_dump_snapshot(int device, const char* path);
/* Starts (enabled != 0, keeping the last max_entries events) or stops and drops
 * (enabled == 0) the trace of alloc/free/map/unmap/oom events that snapshots
 * return as device_traces. device: an index, or FF_DEVICE_ALL (every device in
 * use and every device used later). */
FF_API ff_status_t ff_record_history(int device, int enabled,
                                     size_t max_entries);
/* Tags the trace entries of the calling thread's next calls (alloc,
 * free_requested, segment_map, oom) with `context`, a caller-chosen id that
 * snapshots return as the entry's "context" (0, the default: none). The
 * PyTorch adapter passes the handle of the Python stack it captured, and puts
 * the stack back at snapshot time. Returns the thread's previous context. */
FF_API uint32_t ff_set_trace_context(uint32_t context);
/* What the OOM report knows about the program (fragfree.watch(model, optimizer)
 * keeps it current): bytes of parameters, gradients, optimizer state and other
 * persistent tensors, and the techniques already on (FF_TECH_* bits), so the
 * diagnosis names the four categories and the advice skips what is on. */
#define FF_TECH_BF16_AUTOCAST (1u << 0)
#define FF_TECH_GRADIENT_CHECKPOINTING (1u << 1)
#define FF_TECH_FLASH_ATTENTION (1u << 2)
#define FF_TECH_EIGHT_BIT_OPTIMIZER (1u << 3)
#define FF_TECH_SHARDED (1u << 4)
#define FF_TECH_LORA_PEFT (1u << 5)
#define FF_TECH_CPU_OFFLOAD (1u << 6)
/* device: an index. */
FF_API ff_status_t ff_set_oom_hints(int device, size_t parameter_bytes,
                                    size_t gradient_bytes,
                                    size_t optimizer_state_bytes,
                                    size_t other_persistent_bytes,
                                    uint32_t techniques);
/* Checks the allocator's invariants (tests, debugging): FF_OK or why not.
 * device: an index, or FF_DEVICE_ALL. */
FF_API ff_status_t ff_check_invariants(int device);

FF_API void ff_set_error_handler(ff_error_handler_t handler, void* arg);
/* The calling thread's last error message ("" if none). */
FF_API const char* ff_last_error(void);
FF_API const char* ff_status_name(ff_status_t status);

/* PyTorch's CUDAPluggableAllocator entry points (exact ABI; stream is a
 * cudaStream_t). free receives the allocation's size, device and stream;
 * record_stream only the pointer (its device is the one that owns it).
 * fragfree_malloc is the one function that throws: PyTorch does not check for
 * NULL, so when memory runs out it throws std::runtime_error with the OOM
 * report
 * ("CUDA out of memory. ..."), which PyTorch raises as a RuntimeError. */
FF_API void* fragfree_malloc(size_t size, int device, void* stream);
FF_API void fragfree_free(void* ptr, size_t size, int device, void* stream);
FF_API void fragfree_empty_cache(void);
FF_API void fragfree_set_memory_fraction(double fraction, int device);
FF_API void fragfree_record_stream(void* ptr, void* stream);

/* ---- Pinned host memory (docs/host.md) -------------------------------------
 * Page-locked host memory for asynchronous copies, carved from large chunks
 * pinned once (cuMemHostAlloc on the cuda backend; an mmap emulation on the
 * host and simulated backends). Tuning: FRAGFREE_HOST_CONF. A block used by
 * asynchronous work is handed to ff_host_record_stream; after ff_host_free it
 * is reused only once that work has completed. */
typedef struct ff_host_stats_t {
  uint32_t size;        /* sizeof(ff_host_stats_t), set by the caller */
  uint32_t version;     /* FF_HOST_STATS_VERSION, set by fragfree */
  int64_t pinned_bytes; /* in pinned chunks now */
  int64_t peak_pinned_bytes;
  int64_t live_bytes; /* handed out (rounded sizes) */
  int64_t peak_live_bytes;
  int64_t requested_bytes; /* callers' sizes of live allocations */
  int64_t pending_bytes;   /* freed, waiting for recorded streams */
  int64_t chunks;
  int64_t pin_calls; /* cuMemHostAlloc/cuMemHostRegister (or emulated) calls */
  int64_t unpin_calls;
  int64_t pin_failures;
  int64_t allocs;
  int64_t frees;
  int64_t allocs_without_pin; /* served from memory already pinned */
  int64_t events_recorded;
  int64_t metadata_bytes;       /* fragfree's host metadata now */
  int32_t metadata_on_jemalloc; /* 1: private jemalloc arena; 0: mmap arena */
  int32_t cuda;                 /* 1: really pinned (CUDA); 0: emulated */
} ff_host_stats_t;
#define FF_HOST_STATS_VERSION 1

/* NULL for size 0 (not an error) and on failure (handler called). The memory
 * is aligned to 512 bytes. */
FF_API void* ff_host_malloc(size_t size);
/* NULL is a no-op; an unknown, interior or already freed pointer is
 * FF_ERR_INVALID_ARGUMENT. */
FF_API ff_status_t ff_host_free(void* ptr);
/* ptr (live) is used by work on `stream`; its reuse after ff_host_free waits
 * for that work (an event recorded at free time). */
FF_API ff_status_t ff_host_record_stream(void* ptr, ff_stream_t stream);
/* Unpins every chunk with no live or pending block. */
FF_API ff_status_t ff_host_empty_cache(void);
FF_API ff_status_t ff_host_stats(ff_host_stats_t* out);
/* The stats as one JSON object, plus "backend" and "metadata" strings; returns
 * the full length (excluding the NUL), like ff_stats_json; 0 on error. */
FF_API size_t ff_host_stats_json(char* buf, size_t len);
/* Requested size of a live pinned allocation, 0 if ptr is not one. */
FF_API size_t ff_host_allocation_size(const void* ptr);
/* ---- end of pinned host memory ----------------------------------------------
 */

/* ---- Sleep and wake (docs/sleep.md) ----------------------------------------
 * Release the GPU memory of tagged allocations while keeping every address
 * (RL post-training: the trainer and an inference engine take turns on a GPU).
 * Allocations made on a thread between ff_region_begin(tag) and the matching
 * ff_region_end() carry `tag` (regions nest; the innermost tag applies) and
 * live in arenas of their own. ff_pause releases their physical memory on
 * every device in use, optionally keeping a copy in host memory; the
 * allocations stay live (their pointers remain valid to hold, not to touch)
 * and ff_resume maps memory under them again at the same addresses. While a
 * tag is paused, allocating in its region fails (FF_ERR_STATE) and freeing
 * its allocations is allowed. Every function here may be called through
 * dlsym from a program that preloads libfragfree.so. */
#define FF_BACKUP_NONE 0 /* contents are not kept: undefined after resume */
#define FF_BACKUP_CPU                                     \
  1 /* contents copied to host memory, restored on resume \
     */
/* Opens a region on the calling thread. Tags are 1 to 128 characters without
 * control characters; at most 4096 distinct tags, 64 nested regions. */
FF_API ff_status_t ff_region_begin(const char* tag);
/* Closes the calling thread's innermost region (FF_ERR_STATE when none). */
FF_API ff_status_t ff_region_end(void);
/* Pauses `tags` (ntags names; tags NULL and ntags 0: every tag used so far) on
 * every device in use: waits for the streams that used their memory (not the
 * whole device), copies live allocations to host memory when backup is
 * FF_BACKUP_CPU, then unmaps and releases their pages, so the device's free
 * memory rises by their footprint. A tag never used in a region is
 * FF_ERR_INVALID_ARGUMENT; paused tags are skipped. FF_ERR_STATE during graph
 * capture. */
FF_API ff_status_t ff_pause(const char* const* tags, int ntags, int backup);
/* Maps memory under the paused `tags`' live allocations again (NULL, 0: every
 * paused tag) and restores their backups; not-paused tags are skipped. All or
 * nothing: when memory is short it returns FF_ERR_OOM (never aborts), releases
 * every page it mapped and leaves the tags paused with their backups. */
FF_API ff_status_t ff_resume(const char* const* tags, int ntags);
/* ff_resume_ex flags. FF_RESUME_KEEP_BACKUP: the backups' pinned host memory
 * is kept (not unpinned) once restored, and the next ff_pause with
 * FF_BACKUP_CPU of any tag reuses it instead of pinning new memory: a steady
 * pause/resume cycle then costs only the copies. Kept memory stays pinned
 * (and counted in kept_backup_bytes) until ff_release_backup. */
#define FF_RESUME_KEEP_BACKUP 1u
/* ff_resume with flags (0: ff_resume). Unknown flags are
 * FF_ERR_INVALID_ARGUMENT. */
FF_API ff_status_t ff_resume_ex(const char* const* tags, int ntags,
                                unsigned flags);
/* Frees (unpins) the backup memory kept by ff_resume_ex with
 * FF_RESUME_KEEP_BACKUP on every device; the backups of paused tags are not
 * touched. `freed` (may be NULL): the bytes freed. */
FF_API ff_status_t ff_release_backup(size_t* freed);
/* The tags of `device` (FF_DEVICE_ALL: every device in use) as JSON:
 * {"devices":[{"device":0,"tags":[{"tag":"weights","paused":true,
 * "live_bytes":..,"live_allocations":..,"mapped_bytes":..,"backup_bytes":..,
 * "arenas":..}],"last_pause":{..},"last_resume":{..}}],
 * "known_tags":["weights",...]}. last_pause / last_resume: where the device's
 * last ff_pause and ff_resume spent their time (seconds per phase and counts;
 * docs/sleep.md, "Observability"). Returns the full length (excluding the
 * NUL), like ff_stats_json; 0 on error. */
FF_API size_t ff_paused_json(int device, char* buf, size_t len);
/* ---- end of sleep and wake ------------------------------------------------
 */

/* ---- Sharing memory between processes (docs/ipc.md) ------------------------
 * A producer exports a live block (ff_ipc_export) and sends the handle bytes
 * to a consumer by any means (a pipe, a socket, a pickle); the consumer maps
 * the block's pages into its address space (ff_ipc_open) and later unmaps them
 * (ff_ipc_close). The descriptors travel by pidfd_getfd(2): the consumer needs
 * ptrace access to the producer (same user; see docs/ipc.md for
 * kernel.yama.ptrace_scope). The handle is PyTorch's expandable-segment
 * handle plus fragfree's trailer, so stock PyTorch (torch 2.11) can open it.
 * Lifetime: the block's memory is reused only once the producer has freed it
 * (ff_free), every export of it is released (ff_ipc_release, or the free with
 * FF_IPC_RELEASE_ON_FREE) and every consumer that opened it has closed it or
 * died. The producer notices dead consumers when it frees the block, releases
 * an export, or calls ff_ipc_sweep. Until then the block counts as allocated.
 */
typedef struct ff_ipc_export_info_t {
  uint64_t export_id; /* for ff_ipc_release */
  void* block;        /* start of the whole block ptr lies in */
  size_t block_size;  /* its size (the rounded size fragfree handed out) */
  size_t page_offset; /* ptr - start of the block's first page (PyTorch's
                         ShareableHandle.offset) */
  size_t handle_size; /* bytes of the handle (set also when buf is short) */
} ff_ipc_export_info_t;
/* The export ends when the producer frees the block (PyTorch's reference
 * counting keeps that free until its consumers are done); exporting the same
 * block again this way returns the same export and handle. */
#define FF_IPC_RELEASE_ON_FREE 1u
/* Exports the live block containing ptr into handle[0, handle_len). A handle
 * that does not fit is FF_ERR_INVALID_ARGUMENT with info->handle_size set and
 * nothing exported. FF_ERR_STATE when the backend cannot share pages. */
FF_API ff_status_t ff_ipc_export(const void* ptr, unsigned flags, void* handle,
                                 size_t handle_len, ff_ipc_export_info_t* info);
/* No new opens of the export; the block is freed once the rest of its
 * lifetime rule holds. Unknown or already released ids are an error. */
FF_API ff_status_t ff_ipc_release(uint64_t export_id);
/* Frees exported blocks whose holders are all gone (dead consumers are
 * noticed here). device: an index, or FF_DEVICE_ALL. */
FF_API ff_status_t ff_ipc_sweep(int device);
typedef struct ff_ipc_mapping_t {
  void* ptr;     /* the block's first byte in this process */
  size_t size;   /* the block's size */
  void* base;    /* where the mapped pages start (ptr - page offset) */
  size_t mapped; /* bytes mapped */
} ff_ipc_mapping_t;
/* Maps an exported block on `device` (< 0: the device in the handle).
 * Errors: a malformed handle, the wrong device, the producer gone, the export
 * released, no permission to take the producer's descriptors. */
FF_API ff_status_t ff_ipc_open(const void* handle, size_t handle_len,
                               int device, ff_ipc_mapping_t* out);
/* Unmaps the opened block containing ptr. The caller's work on it must be
 * complete. Closing twice, or a pointer that is not in an opened block, is
 * FF_ERR_INVALID_ARGUMENT. */
FF_API ff_status_t ff_ipc_close(void* ptr);
/* For a pointer anywhere inside a live fragfree block, or inside a block
 * opened with ff_ipc_open: the block's start and size (what
 * cuMemGetAddressRange answers for cudaMalloc memory). FF_ERR_INVALID_ARGUMENT
 * for any other pointer; base and size may be NULL. */
FF_API ff_status_t ff_get_address_range(const void* ptr, void** base,
                                        size_t* size);
/* ---- end of sharing memory between processes ------------------------------
 */

#ifdef __cplusplus
}
#endif

#endif /* FRAGFREE_FRAGFREE_H_ */
