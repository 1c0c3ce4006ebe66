/* version.c — the version of the libqkv linked at run time. */
#include "qkv/base.h"

const char *qkv_version(void) { return QKV_VERSION; }
