from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse


@login_required
def runs(request: HttpRequest) -> HttpResponse:
    return HttpResponse("Canopy")
