/*
 * assets.h — the page's files embedded in the binary (scripts/embed-web.sh
 * writes the table at build time from web/): each file's bytes and its
 * gzip (gzip -9n), served by serve/assets.c.
 */
#ifndef QKV_SERVE_ASSETS_H
#define QKV_SERVE_ASSETS_H

typedef struct {
    const char *name;                   /* the file's name under web/ */
    const char *type;                   /* its Content-Type */
    const unsigned char *raw, *raw_end; /* the file */
    const unsigned char *gz, *gz_end;   /* gzip -9n of it */
} serve_asset;

extern const serve_asset serve_asset_table[];
extern const int serve_asset_count;

/* The asset of that name, or NULL (only names in the table exist: a path
 * with "..", "/" or anything else not listed is not found). */
const serve_asset *serve_asset_find(const char *name);

#endif /* QKV_SERVE_ASSETS_H */
