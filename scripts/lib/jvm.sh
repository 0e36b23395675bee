# shellcheck shell=bash
# Sourced, after scripts/lib/daemon.sh, by scripts/pulsar.sh and
# scripts/cassandra.sh: a Java server from Maven Central, without Docker or
# tarballs.
#
# The script sets CACHE and SFX (through cache_dir and daemon_files),
# POM (its pom.xml, whose runtime dependencies are the server) and LIB
# (where the jars go, $CACHE/lib), then calls
#
#   fetch_jars WHAT JAR...        copy the jars of POM into LIB unless LIB holds them
#                                 already; each JAR (a glob) must be among them
#   java_bin JAVA WHAT VERSION... the java binary to use, of one of the
#                                 VERSIONs ("17", or "17+" for 17 or later)
#   cds_flags ENABLED JAVA [FLAG...]
#   cds_finish CLEAN              (daemon.sh's DAEMON_AFTER_EXIT)
#
# The class-data archive (AppCDS): the first server started records the
# classes it loaded into a dynamic archive when it exits gracefully
# ('down'); later starts map it and come up roughly twice as fast. The
# archive is keyed by JDK and jar set, recorded to a .tmp name and only kept
# after a clean exit. A stale or unusable archive is harmless: with
# -Xshare:auto the JVM then just starts without it.

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

jars_current() { [[ -f "$CACHE/lib.stamp" && "$(cat "$CACHE/lib.stamp")" == "$(pom_hash)" && -d "$LIB" ]]; }

# fetch_jars WHAT JAR...: Maven's dependency:copy-dependencies of POM into
# LIB, once per version of POM (a stamp holds its hash); concurrent callers
# wait for the first (fd 8). WHAT names the server in messages
# ("Pulsar 4.2.4"); each JAR is a file name glob that must match in LIB.
fetch_jars() {
	local what="$1" jar
	shift
	jars_current && return 0
	command -v mvn >/dev/null || die "mvn (Maven 3) is required to fetch the $what jars"
	exec 8>"$CACHE/.fetch.lock"
	flock 8
	if jars_current; then
		exec 8>&-
		return 0 # fetched meanwhile by a concurrent call
	fi
	log "fetching $what jars from Maven Central (first run only)…"
	local t0=$SECONDS mvnlog="$CACHE/mvn.log"
	rm -rf "$LIB" "$CACHE/lib.stamp"
	if ! mvn -B -q -f "$POM" dependency:copy-dependencies \
		-DoutputDirectory="$LIB" -DincludeScope=runtime >"$mvnlog" 2>&1; then
		tail -n 40 "$mvnlog" >&2
		rm -rf "$LIB"
		die "Maven could not fetch the $what jars (full log: $mvnlog)"
	fi
	for jar in "$@"; do
		compgen -G "$LIB/$jar" >/dev/null || die "$jar missing after fetch"
	done
	pom_hash >"$CACHE/lib.stamp"
	exec 8>&-
	log "fetched $(find "$LIB" -name '*.jar' | wc -l) jars ($(du -sh "$LIB" | cut -f1)) in $((SECONDS - t0))s"
}

# java_bin JAVA WHAT VERSION...: print the java binary: JAVA when set, else
# $JAVA_HOME/bin/java, else java on PATH. It must be one of the Java
# VERSIONs ("17+": 17 or later), which WHAT needs.
java_bin() {
	local j="$1" what="$2"
	shift 2
	local want="$*"
	want="${want// / or }"
	if [[ -z "$j" && -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then j="$JAVA_HOME/bin/java"; fi
	[[ -n "$j" ]] || j="$(command -v java || true)"
	[[ -n "$j" ]] || die "java ($want) is required"
	local v major ok
	v="$("$j" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
	major="${v%%.*}"
	for ok in "$@"; do
		if [[ "$major" == "${ok%+}" ]] || [[ "$ok" == *+ && "$major" =~ ^[0-9]+$ && "$major" -ge "${ok%+}" ]]; then
			echo "$j"
			return 0
		fi
	done
	die "$j is Java '$v'; $what needs $want"
}

# cds_flags ENABLED JAVA [FLAG...]: print the JVM flags, one a line, that
# use the class-data archive for JAVA and the jars of POM, or record it
# when there is none; with FLAGs (printed first) where the JVM needs them
# for archiving. Nothing unless ENABLED is 1.
cds_flags() {
	[[ "$1" == 1 ]] || return 0
	local java="$2" key
	shift 2
	key="$({ readlink -f "$java"; "$java" -version 2>&1; pom_hash; } | sha256sum | cut -c1-12)"
	local archive="$CACHE/cds-$key.jsa"
	(($# == 0)) || printf '%s\n' "$@"
	if [[ -s "$archive" ]]; then
		echo "-XX:SharedArchiveFile=$archive"
		echo "-Xshare:auto"
	else
		rm -f "$CACHE"/cds-*.jsa "$CACHE"/cds-*.jsa.tmp"$SFX"
		echo "-XX:ArchiveClassesAtExit=$archive.tmp$SFX"
	fi
}

# cds_finish CLEAN: after the server exited. Keeps the archive it recorded
# when CLEAN is 1 (it exited by itself after SIGTERM), else deletes it.
cds_finish() {
	local tmp
	for tmp in "$CACHE"/cds-*.jsa.tmp"$SFX"; do
		[[ -e "$tmp" ]] || continue
		local final="${tmp%.tmp"$SFX"}"
		if [[ "$1" == 1 && -s "$tmp" ]]; then
			mv -f "$tmp" "$final" && log "recorded a class-data archive for faster starts ($(du -h "$final" | cut -f1))"
		else
			rm -f "$tmp"
		fi
	done
}
