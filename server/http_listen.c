/* server/http_listen.c — see http_listen.h. */
#include "server/http_listen.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Resolves "host:port" / "[v6]:port"; *sa, *len and *port are set on ST_OK
 * only. */
static enum status listen_resolve(const char *addr, struct sockaddr_storage *sa, socklen_t *len,
                                  unsigned *port, struct error *err)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    size_t hlen;
    int rv;

    if (!colon)
        return error_set(err, ST_INVALID, "invalid \"listen\": expected HOST:PORT");
    hlen = (size_t)(colon - addr);
    if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']')
        xsnprintf(host, sizeof(host), "%.*s", (int)(hlen - 2), addr + 1);
    else
        xsnprintf(host, sizeof(host), "%.*s", (int)hlen, addr);
    rv = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rv != 0)
        return error_set(err, ST_INVALID, "could not resolve \"listen\" %s: %s", addr,
                         gai_strerror(rv));
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    *port = (unsigned)strtoul(colon + 1, NULL, 10);
    freeaddrinfo(ai);
    return ST_OK;
}

/* The port the socket is bound to (the asked one unless it was 0). */
static unsigned listen_port(int fd, unsigned asked)
{
    struct sockaddr_storage sa = {0};
    socklen_t len = sizeof(sa);

    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        return asked;
    if (sa.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    if (sa.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&sa)->sin_port);
    return asked;
}

enum status http_listen_open(const char *addr, int *fd, unsigned *port, struct error *err)
{
    struct sockaddr_storage sa = {0};
    socklen_t len = 0;
    unsigned asked = 0;
    int s, on = 1, e;
    enum status st = listen_resolve(addr, &sa, &len, &asked, err);

    if (st != ST_OK)
        return st;
    s = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return error_set(err, ST_UNAVAILABLE, "could not listen on %s: %s", addr, strerror(errno));
    (void)setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (sa.ss_family == AF_INET6)
        (void)setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
    if (bind(s, (struct sockaddr *)&sa, len) != 0 || listen(s, SOMAXCONN) != 0) {
        e = errno;
        close(s);
        return error_set(err, ST_UNAVAILABLE, "could not listen on %s: %s", addr, strerror(e));
    }
    *fd = s;
    *port = listen_port(s, asked);
    return ST_OK;
}
