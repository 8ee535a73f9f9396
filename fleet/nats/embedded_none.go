//go:build nofleetserver

package nats

const haveServer = false

// startServer: this build has no embedded server.
func startServer(EmbeddedConfig, string, int, string) (*Embedded, error) {
	return nil, ErrNoEmbedded
}
