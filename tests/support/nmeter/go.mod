// nmeter for the busybox stand-in of scripts/conformance.sh: Debian's busybox-static has no
// nmeter applet, which Kubernetes' container lifecycle tests use for milliseconds.
module nodelet.test/nmeter

go 1.26.0
