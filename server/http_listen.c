/* server/http_listen.c — see http_listen.h. */
#include "server/http_listen.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>

enum status http_listen_resolve(const char *listen, struct sockaddr_storage *addr, unsigned *port,
                                struct error *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    size_t hlen;
    int rv;

    if (!colon)
        return error_set(err, ST_INVALID, "invalid \"listen\": expected HOST:PORT");
    hlen = (size_t)(colon - listen);
    if (hlen >= 2 && listen[0] == '[' && listen[hlen - 1] == ']')
        xsnprintf(host, sizeof(host), "%.*s", (int)(hlen - 2), listen + 1);
    else
        xsnprintf(host, sizeof(host), "%.*s", (int)hlen, listen);
    rv = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rv != 0)
        return error_set(err, ST_INVALID, "could not resolve \"listen\" %s: %s", listen,
                         gai_strerror(rv));
    memcpy(addr, ai->ai_addr, ai->ai_addrlen);
    *port = (unsigned)strtoul(colon + 1, NULL, 10);
    freeaddrinfo(ai);
    return ST_OK;
}
