/*
 * dlpack_abi.h — the part of the DLPack ABI (major version 1) the extension uses to read
 * torch tensors and hand results to torch without going through torch's Python methods:
 * the tensor description, the owning (versioned) tensor, and the C exchange table that a
 * tensor type publishes as the capsule `type.__dlpack_c_exchange_api__` (DLPack 1.3).
 * Declared here from the specification's layouts (scorch builds without torch's headers);
 * the names are scorch's own.
 */
#ifndef SC_PY_DLPACK_ABI_H
#define SC_PY_DLPACK_ABI_H

#include <stdint.h>

#define SC_DL_MAJOR 1u
#define SC_DL_CPU 1               /* kDLCPU */
#define SC_DL_INT 0u              /* type codes: signed integer, float */
#define SC_DL_FLOAT 2u
#define SC_DL_EXCHANGE_CAPSULE "dlpack_exchange_api"

typedef struct sc_dl_device {
    int32_t type;
    int32_t id;
} sc_dl_device;

typedef struct sc_dl_dtype {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} sc_dl_dtype;

typedef struct sc_dl_tensor {
    void *data;
    sc_dl_device device;
    int32_t ndim;
    sc_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;          /* in elements */
    uint64_t byte_offset;
} sc_dl_tensor;

typedef struct sc_dl_version {
    uint32_t major;
    uint32_t minor;
} sc_dl_version;

typedef struct sc_dl_managed {
    sc_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct sc_dl_managed *self);
    uint64_t flags;
    sc_dl_tensor tensor;
} sc_dl_managed;

typedef struct sc_dl_exchange_header {
    sc_dl_version version;
    struct sc_dl_exchange_header *prev_api;
} sc_dl_exchange_header;

/* The exchange table: every call returns 0, or -1 with a Python exception set.  Only the
 * two conversions scorch uses are typed; the other entries keep their places. */
typedef struct sc_dl_exchange {
    sc_dl_exchange_header header;
    void (*managed_tensor_allocator)(void);
    void (*managed_tensor_from_py_object_no_sync)(void);
    /* a Python tensor owning `managed` (whose deleter the tensor calls when it dies) */
    int (*managed_tensor_to_py_object_no_sync)(sc_dl_managed *managed, void **py_out);
    /* a view of py_object (exactly the publishing type) valid while the caller holds it;
     * may be NULL where the producer does not offer it */
    int (*dltensor_from_py_object_no_sync)(void *py_object, sc_dl_tensor *out);
    void (*current_work_stream)(void);
} sc_dl_exchange;

#endif
