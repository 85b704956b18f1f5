// Package hostcheck keeps a listener that serves no site from answering
// pages of other sites: it serves only requests whose Host names the
// listener by an IP address, localhost (or a name under .localhost) or a
// name the operator listed, and answers any other 421 Misdirected Request.
// A browser sends the name it resolved, so a page whose name was made to
// resolve to the listener's address (DNS rebinding) cannot read it as its
// own origin. The admin and the ops listeners of floodgate serve, and the
// debug port and the Prometheus address of floodgate rls, use it.
package hostcheck
