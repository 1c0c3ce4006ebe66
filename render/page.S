/*
 * page.S — render/inspect_page.html inside the library as the NUL-terminated
 * bytes render_inspect_page[]: the page stays a real HTML file in the tree
 * (readable, lintable) and the binary still needs no file at run time.
 * The Makefile makes this object depend on the HTML file.
 */
    .section .rodata
    .balign 16
    .global render_inspect_page
    .type render_inspect_page, @object
render_inspect_page:
    .incbin "render/inspect_page.html"
    .byte 0
    .size render_inspect_page, . - render_inspect_page
    .section .note.GNU-stack, "", @progbits
