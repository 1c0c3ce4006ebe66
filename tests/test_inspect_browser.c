/*
 * test_inspect_browser.c — the HTML page in a real browser: `qkv inspect
 * --html` on 年假怎么申请？ in the chat template (45 tokens, 30 x 9 maps),
 * then tests/browser/check_inspect_page.py drives headless Chromium through
 * the DevTools protocol: no script error, 270 maps in the grid, clicking or
 * choosing another head changes the large view, hover shows a weight. It
 * saves a screenshot to build/inspect-page.png.
 * SKIPs (which fails `make test`) when no Chromium is installed (make deps
 * installs the Debian package) or the model is missing.
 */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

TEST(inspect_browser_page) {
    const char *m = test_model_path();
    if (!test_require_model()) return;
    if (system("command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1") != 0) {
        test_skip("chromium missing (Debian: apt-get install chromium; make deps installs it)");
        return;
    }
    char page[600];
    snprintf(page, sizeof page, "%s/page.html", test_tmpdir());
    const char *argv[] = {"inspect", "-m", m, "-p", "年假怎么申请？", "--chat", "--html", page, NULL};
    char *so = NULL, *se = NULL;
    int rc = test_run_cli(argv, NULL, &so, &se);
    CHECK(rc == 0 && so && strstr(so, "file://"), "inspect --html: exit %d: %s%s", rc, so ? so : "", se ? se : "");
    free(so);
    free(se);
    if (rc) return;
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "python3 tests/browser/check_inspect_page.py '%s' build/inspect-page.png 30 9 2>&1", page);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run %s", cmd);
    if (!p) return;
    char line[1024];
    while (fgets(line, sizeof line, p)) {
        printf("     %s", line);
        if (!strncmp(line, "FAIL", 4)) CHECK(0, "browser: %s", line);
    }
    int st = pclose(p);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (code == 77) return; /* the script found no browser after all */
    CHECK(code == 0, "check_inspect_page.py exited with %d", code);
}
