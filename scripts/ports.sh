# Sourced by the bench scripts: hands out free loopback ports from
# BASE_PORT up, each once.

# free_port prints the first port from $1 up that nothing listens on.
free_port() {
	local p=$1
	while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
	echo "$p"
}

# pick VAR: set VAR to the next free port (no subshell, so that the
# ports handed out stay distinct).
next=$BASE_PORT
pick() {
	local p
	p=$(free_port "$next")
	next=$((p + 1))
	printf -v "$1" '%s' "$p"
}
