// ferretdb-runner: a MongoDB-wire-protocol server for hookbridge's tests, built on embeddable
// FerretDB (SQLite backend by default). Started and stopped by scripts/ferretdb.sh.
//
//	ferretdb-runner -listen-addr 127.0.0.1:27017 -data-dir .run/ferretdb-27017/data
//	ferretdb-runner -listen-addr 127.0.0.1:27017 -postgresql-url postgres://user:pass@127.0.0.1:5432/db
//	ferretdb-runner -listen-addr 127.0.0.1:27017 -listen-tls 127.0.0.1:27018 -tls-cert-file s.pem -tls-key-file s.key
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	addr := flag.String("listen-addr", "127.0.0.1:27017", "TCP address to listen on")
	dataDir := flag.String("data-dir", "data", "directory of the SQLite databases (one file per database)")
	pgURL := flag.String("postgresql-url", "", "use the PostgreSQL backend at this URL instead of SQLite")
	logLevel := flag.String("log-level", "warn", "debug, info, warn or error")
	tlsAddr := flag.String("listen-tls", "", "also listen with TLS on this address (needs -tls-cert-file, -tls-key-file)")
	tlsCert := flag.String("tls-cert-file", "", "server certificate (PEM) for -listen-tls")
	tlsKey := flag.String("tls-key-file", "", "server key (PEM) for -listen-tls")
	tlsCA := flag.String("tls-ca-file", "", "CA (PEM) that client certificates must chain to; empty: none asked")
	flag.Parse()

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fatal("bad -log-level", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	config := ferretdb.Config{
		Listener: ferretdb.ListenerConfig{
			TCP: *addr, TLS: *tlsAddr, TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey, TLSCAFile: *tlsCA,
		},
		Logger: logger,
	}
	if *pgURL != "" {
		config.Handler, config.PostgreSQLURL = "postgresql", *pgURL
	} else {
		dir, err := filepath.Abs(*dataDir)
		if err == nil && strings.ContainsAny(dir, "?#%") {
			err = errors.New("FerretDB cannot open SQLite files under a path with '?', '#' or '%' in it")
		}
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err != nil {
			fatal("bad -data-dir", err)
		}
		config.Handler, config.SQLiteURL = "sqlite", "file:"+dir+"/"
	}

	f, err := ferretdb.New(&config)
	if err != nil {
		fatal("cannot start FerretDB", err)
	}

	// SIGTERM or SIGINT: stop accepting, close connections and the backend, then exit 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Warn("serving", "addr", *addr, "handler", config.Handler)
	if err := f.Run(ctx); err != nil {
		fatal("FerretDB stopped", err)
	}
}

func fatal(msg string, err error) {
	slog.Error(msg, "error", err)
	os.Exit(1)
}
