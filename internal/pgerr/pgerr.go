package pgerr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Connection reports whether err is a failure to reach or keep the
// database: connect errors, network errors, io.EOF, timeouts,
// cancellations, errors pgconn deems safe to retry, SQLSTATE class 08,
// 57P01-57P03 (admin or crash shutdown, cannot connect now) and 53300 (too
// many connections). Any other *pgconn.PgError is the statement's.
func Connection(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") ||
			pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" ||
			pe.Code == "53300"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ce) || errors.As(err, &oe) || errors.As(err, &ne) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		// pgxpool's errors after Close carry no type of their own.
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed")
}
