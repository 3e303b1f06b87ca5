/*
 * tmpdir.h — temporary directories for the C tests that write files (kernel caches):
 * tmpdir_remove deletes a directory tree without following symlinks.  Include after a
 * feature-test macro (_GNU_SOURCE) like the tests do.
 */
#ifndef SC_TMPDIR_H
#define SC_TMPDIR_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void tmpdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            tmpdir_remove(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

#endif
