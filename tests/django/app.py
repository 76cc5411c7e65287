"""A Django upstream for tests/integration/django.rs: `/login` answers with the `api_key`
parameters Django read from the query and the form, and the charset it read them in;
`/tools` (Django REST framework) with the `user` member of the JSON body it parsed.

    python3 tests/django/app.py PORT
"""

import json
import sys
from wsgiref.simple_server import WSGIRequestHandler, make_server

import django
from django.conf import settings

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["*"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="tollgate-test",
    MIDDLEWARE=[],
    INSTALLED_APPS=["rest_framework"],
    REST_FRAMEWORK={
        "DEFAULT_AUTHENTICATION_CLASSES": [],
        "DEFAULT_PERMISSION_CLASSES": [],
        "UNAUTHENTICATED_USER": None,
    },
)
django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402 (after setup)
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from rest_framework.decorators import api_view  # noqa: E402
from rest_framework.response import Response  # noqa: E402


def params(request):
    read = {
        "encoding": request.encoding,
        "get": request.GET.getlist("api_key"),
        "post": request.POST.getlist("api_key"),
    }
    return HttpResponse(json.dumps(read), content_type="application/json")


@api_view(["POST"])
def tools(request):
    return Response({"encoding": request.encoding, "user": request.data.get("user")})


urlpatterns = [path("login", params), path("tools", tools)]


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = make_server("127.0.0.1", int(sys.argv[1]), get_wsgi_application(), handler_class=Quiet)
    server.serve_forever()
