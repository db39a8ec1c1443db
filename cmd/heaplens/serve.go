package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/heaplens/heaplens/internal/web"
)

// liveURL is the URL of the --live web UI, once it serves.
var liveURL string

// startLive serves the web UI of a capture being written, in the
// background, and prints its URL.
func startLive(capturePath, addr string, stderr io.Writer) {
	srv := &web.Server{Path: capturePath, Live: true, View: "timeline"}
	url, serve, err := web.Listen(addr, srv)
	if err != nil {
		fmt.Fprintf(stderr, "heaplens: --live: %v; running without the web UI\n", err)
		return
	}
	liveURL = url
	fmt.Fprintf(stderr, "heaplens: live web UI at %s\n", url)
	go serve()
}

// waitInterrupt keeps the --live web UI up after the command ended, until
// SIGINT or SIGTERM.
func waitInterrupt(stderr io.Writer) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	fmt.Fprintf(stderr, "heaplens: the command ended; still serving %s (Ctrl-C to stop)\n", liveURL)
	<-ch
}
