// Command nmeter is the part of busybox's nmeter applet that Kubernetes' node e2e tests use:
// `nmeter -d0 '%3t'` prints the wall-clock time with milliseconds (15:04:05.000), one line per
// interval (-d, in milliseconds; 0 prints as fast as the reader takes them). Other format
// directives are refused, so a test needing more fails loudly rather than reading garbage.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	delay := 1000 * time.Millisecond
	format := ""
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-d" && i+1 < len(args):
			i++
			ms, err := strconv.Atoi(args[i])
			if err != nil || ms < 0 {
				fail("bad delay %q", args[i])
			}
			delay = time.Duration(ms) * time.Millisecond
		case strings.HasPrefix(a, "-d"):
			ms, err := strconv.Atoi(a[2:])
			if err != nil || ms < 0 {
				fail("bad delay %q", a)
			}
			delay = time.Duration(ms) * time.Millisecond
		case format == "":
			format = a
		default:
			fail("unexpected argument %q", a)
		}
	}
	digits := -1
	switch format {
	case "%t":
		digits = 0
	case "%1t", "%2t", "%3t", "%4t", "%5t", "%6t":
		digits = int(format[1] - '0')
	default:
		fail("only %%t with 0-6 fraction digits is supported, not %q", format)
	}
	layout := "15:04:05"
	if digits > 0 {
		layout += "." + strings.Repeat("0", digits)
	}
	out := bufio.NewWriter(os.Stdout)
	for {
		if _, err := fmt.Fprintln(out, time.Now().UTC().Format(layout)); err != nil {
			os.Exit(0)
		}
		if err := out.Flush(); err != nil {
			// The reader is gone (`| head -n1`).
			os.Exit(0)
		}
		time.Sleep(delay)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "nmeter: "+format+"\n", args...)
	os.Exit(1)
}
