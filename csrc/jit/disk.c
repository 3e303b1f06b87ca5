/*
 * disk.c — the on-disk side of the cache: whether <cache_dir>/<hex>.so may be loaded
 * (a regular file, not a symlink, owned by the effective user, not group/world-writable;
 * the directory itself was checked to be the user's and 0700-like in sc_jit_new, so
 * nobody else can swap the file between this check and dlopen), and loading it once its
 * ELF headers show it whole; small notes kept beside the kernels under the same checks.
 */
#define _GNU_SOURCE
#include "jit_impl.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(sc_jit_fn) == sizeof(void *), "dlsym results must fit a sc_jit_fn");

int sc_jit_disk_probe(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return -1;
    return 1;
}

/* The ELF class and byte order of this process, which a loadable kernel shares. */
#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Ehdr elf_ehdr;
typedef Elf64_Phdr elf_phdr;
#define HOST_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr elf_ehdr;
typedef Elf32_Phdr elf_phdr;
#define HOST_CLASS ELFCLASS32
#endif
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_DATA ELFDATA2MSB
#else
#define HOST_DATA ELFDATA2LSB
#endif

/* Whether the size-byte file open as fd is an ELF shared object of this process's class
 * and byte order whose program header table and loadable segments all lie inside it.
 * dlopen maps the segments without comparing them with the file's size, and the first
 * touch of a mapped page past the end of the file raises SIGBUS: a kernel file cut short
 * (a full disk, an interrupted copy of the cache) has to be refused before dlopen. */
static bool elf_whole(int fd, uint64_t size)
{
    elf_ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        return false;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != HOST_CLASS ||
        eh.e_ident[EI_DATA] != HOST_DATA || eh.e_type != ET_DYN ||
        eh.e_phentsize != sizeof(elf_phdr) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM)
        return false;
    if (eh.e_phoff > size || (uint64_t)eh.e_phnum * sizeof(elf_phdr) > size - eh.e_phoff)
        return false;
    elf_phdr ph[16];
    for (unsigned i = 0; i < eh.e_phnum;) {
        unsigned k = eh.e_phnum - i < 16u ? eh.e_phnum - i : 16u;
        size_t bytes = k * sizeof *ph;
        off_t at = (off_t)(eh.e_phoff + (uint64_t)i * sizeof *ph);
        if (pread(fd, ph, bytes, at) != (ssize_t)bytes)
            return false;
        for (unsigned j = 0; j < k; j++)
            if (ph[j].p_type == PT_LOAD &&
                (ph[j].p_offset > size || ph[j].p_filesz > size - ph[j].p_offset))
                return false;
        i += k;
    }
    return true;
}

/* Whether path names a regular file that elf_whole accepts.  dlopen then opens the path
 * again: only this user can change the cache directory, and it replaces a kernel only by
 * renaming a finished file over it, so the path still names a whole file there. */
static bool loadable(const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
              elf_whole(fd, (uint64_t)st.st_size);
    close(fd);
    return ok;
}

sc_status sc_jit_disk_open(const char *path, void **lib, sc_error *err)
{
    *lib = NULL;
    if (!loadable(path))
        return sc_fail(err, SC_RUNTIME, SC_JIT_STAGE,
                       "cannot load kernel %s: not a whole shared object (cut short?)", path);
    *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*lib) {
        const char *e = dlerror();
        return sc_fail(err, SC_RUNTIME, SC_JIT_STAGE, "cannot load kernel: %s", e ? e : path);
    }
    return SC_OK;
}

sc_status sc_jit_disk_symbol(void *lib, const char *path, const char *symbol, sc_jit_fn *fn,
                             sc_error *err)
{
    dlerror();
    void *f = dlsym(lib, symbol);
    const char *e = dlerror();
    if (e || !f) {
        sc_status st = sc_fail(err, SC_RUNTIME, SC_JIT_STAGE,
                               "symbol '%s' not found in kernel %s: %s", symbol, path,
                               e ? e : "it resolves to NULL");
        dlclose(lib);
        return st;
    }
    memcpy(fn, &f, sizeof *fn); /* POSIX: dlsym's void * holds a function address */
    return SC_OK;
}

/* <cache_dir>/<name><suffix> into path (no allocation: a failed one must not turn the
 * optional note into an error); false where it does not fit. */
static bool note_path(const sc_jit *jit, const char *name, const char *suffix, char *path,
                      size_t cap)
{
    if (!jit->cache_dir)   /* (no usable cache directory: no notes) */
        return false;
    int n = snprintf(path, cap, "%s/%s%s", jit->cache_dir, name, suffix);
    return n > 0 && (size_t)n < cap;
}

int64_t sc_jit_note_read(sc_jit *jit, const char *name, char *buf, size_t cap)
{
    char path[4096];
    if (!jit || !name || !buf || cap == 0)
        return -1;
    int64_t n = -1;
    int fd = note_path(jit, name, "", path, sizeof path) && sc_jit_disk_probe(path) > 0
                 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
                 : -1;
    if (fd >= 0) {
        ssize_t r = read(fd, buf, cap - 1);
        n = r < 0 ? -1 : r;
        close(fd);
    }
    buf[n < 0 ? 0 : n] = '\0';
    return n;
}

bool sc_jit_note_write(sc_jit *jit, const char *name, const char *text)
{
    char tmp[4096], path[4096], suffix[48];
    if (!jit || !name || !text)
        return false;
    snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    if (!note_path(jit, name, suffix, tmp, sizeof tmp) ||
        !note_path(jit, name, "", path, sizeof path))
        return false;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    size_t n = strlen(text);
    bool ok = write(fd, text, n) == (ssize_t)n;
    ok = close(fd) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok)
        unlink(tmp);
    return ok;
}
