"""The firmware update operations of the route table (routes.py adds them): images, manifests, campaigns."""

from __future__ import annotations

from devicehub.api import campaign_routes, firmware_routes
from devicehub.api.errors import V3Error
from devicehub.api.route_spec import Param, Reply, Route

_ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
IMAGE_ID = Param("image_id", _ID, "the firmware image's id (32 lowercase hex)")
MANIFEST_ID = Param("manifest_id", _ID, "the firmware manifest's id (32 lowercase hex)")
CAMPAIGN_ID = Param("campaign_id", _ID, "the update campaign's id (32 lowercase hex)")
PAGE = (
    Param("limit", {"type": "integer", "minimum": 2, "maximum": 1000}, "page size (default 50)"),
    Param("after", {"type": "string", "maxLength": 64}, "id cursor: the page starts after it"),
)


def v3(status: int, description: str) -> Reply:
    return Reply(status, description, model=V3Error)


E401 = v3(401, "missing, unknown or revoked API key")
UPLOAD = v3(400, "not a multipart/form-data body with one `datafile` part, or a bad field (names it)")
TAG_IMAGES, TAG_MANIFESTS, TAG_CAMPAIGNS = "firmware-images", "firmware-manifests", "update-campaigns"
CAMPAIGN_404 = v3(404, "no such campaign in the key's account")
CAMPAIGN_409 = v3(409, "the campaign's phase does not allow this (names the phase)")

FIRMWARE_ROUTES: tuple[Route, ...] = (
    # ---- images ---------------------------------------------------------------------------------------------
    Route(
        "POST",
        "/v3/firmware-images",
        firmware_routes.add_image,
        "Upload a firmware image (multipart: `datafile`, `name`, `description`), streamed into the store",
        TAG_IMAGES,
        (
            Reply(201, "stored", firmware_routes.FirmwareImageModel),
            UPLOAD,
            E401,
            v3(413, "the image is larger than --firmware-max-bytes"),
        ),
    ),
    Route(
        "GET",
        "/v3/firmware-images",
        firmware_routes.list_images,
        "The account's firmware images",
        TAG_IMAGES,
        (Reply(200, "a page", firmware_routes.FirmwareImageList), v3(400, "a bad parameter"), E401),
        query=PAGE,
    ),
    Route(
        "GET",
        "/v3/firmware-images/{image_id}",
        firmware_routes.get_image,
        "One firmware image",
        TAG_IMAGES,
        (Reply(200, "the image", firmware_routes.FirmwareImageModel), E401, v3(404, "no such image")),
        path_params=(IMAGE_ID,),
    ),
    Route(
        "GET",
        "/v3/firmware-images/{image_id}/datafile",
        firmware_routes.image_datafile,
        "The image's bytes",
        TAG_IMAGES,
        (Reply(200, "the bytes", media="application/octet-stream"), E401, v3(404, "no such image")),
        path_params=(IMAGE_ID,),
    ),
    Route(
        "DELETE",
        "/v3/firmware-images/{image_id}",
        firmware_routes.delete_image,
        "Delete a firmware image",
        TAG_IMAGES,
        (Reply(204, "deleted"), E401, v3(404, "no such image")),
        path_params=(IMAGE_ID,),
    ),
    # ---- manifests ------------------------------------------------------------------------------------------
    Route(
        "POST",
        "/v3/firmware-manifests",
        firmware_routes.add_manifest,
        "Upload a manifest made by manifest-tool (multipart: `datafile`, `name`, `description`); parsed on arrival",
        TAG_MANIFESTS,
        (
            Reply(201, "stored", firmware_routes.FirmwareManifestModel),
            v3(400, "not multipart, no `datafile`, or not a manifest-tool v3 manifest (says what is wrong)"),
            E401,
            v3(413, "the manifest is larger than 16 KiB"),
        ),
    ),
    Route(
        "GET",
        "/v3/firmware-manifests",
        firmware_routes.list_manifests,
        "The account's firmware manifests",
        TAG_MANIFESTS,
        (Reply(200, "a page", firmware_routes.FirmwareManifestList), v3(400, "a bad parameter"), E401),
        query=PAGE,
    ),
    Route(
        "GET",
        "/v3/firmware-manifests/{manifest_id}",
        firmware_routes.get_manifest,
        "One firmware manifest",
        TAG_MANIFESTS,
        (Reply(200, "the manifest", firmware_routes.FirmwareManifestModel), E401, v3(404, "no such manifest")),
        path_params=(MANIFEST_ID,),
    ),
    Route(
        "GET",
        "/v3/firmware-manifests/{manifest_id}/datafile",
        firmware_routes.manifest_datafile,
        "The manifest's bytes",
        TAG_MANIFESTS,
        (Reply(200, "the bytes", media="application/octet-stream"), E401, v3(404, "no such manifest")),
        path_params=(MANIFEST_ID,),
    ),
    Route(
        "DELETE",
        "/v3/firmware-manifests/{manifest_id}",
        firmware_routes.delete_manifest,
        "Delete a manifest",
        TAG_MANIFESTS,
        (Reply(204, "deleted"), E401, v3(404, "no such manifest")),
        path_params=(MANIFEST_ID,),
    ),
    # ---- campaigns ------------------------------------------------------------------------------------------
    Route(
        "POST",
        "/v3/update-campaigns",
        campaign_routes.create_campaign,
        "Create an update campaign (draft)",
        TAG_CAMPAIGNS,
        (
            Reply(201, "created", campaign_routes.CampaignModel),
            v3(400, "a bad field: an empty or unknown device filter, an unknown manifest (names it)"),
            E401,
            v3(409, "created with `state: scheduled` but it cannot start (no manifest, its image not uploaded)"),
            v3(413, "the body is larger than the limit"),
        ),
        body=campaign_routes.CampaignPostBody,
    ),
    Route(
        "GET",
        "/v3/update-campaigns",
        campaign_routes.list_campaigns,
        "The account's update campaigns",
        TAG_CAMPAIGNS,
        (Reply(200, "a page", campaign_routes.CampaignList), v3(400, "a bad parameter"), E401),
        query=PAGE,
    ),
    Route(
        "GET",
        "/v3/update-campaigns/{campaign_id}",
        campaign_routes.get_campaign,
        "One update campaign",
        TAG_CAMPAIGNS,
        (Reply(200, "the campaign", campaign_routes.CampaignModel), E401, CAMPAIGN_404),
        path_params=(CAMPAIGN_ID,),
    ),
    Route(
        "PUT",
        "/v3/update-campaigns/{campaign_id}",
        campaign_routes.update_campaign,
        "Change a draft campaign; `state: scheduled` starts it (mbed-cloud-sdk 2.x's start_campaign)",
        TAG_CAMPAIGNS,
        (
            Reply(200, "the campaign", campaign_routes.CampaignModel),
            v3(400, "a bad field"),
            E401,
            CAMPAIGN_404,
            CAMPAIGN_409,
            v3(413, "the body is larger than the limit"),
        ),
        body=campaign_routes.CampaignPutBody,
        path_params=(CAMPAIGN_ID,),
    ),
    Route(
        "DELETE",
        "/v3/update-campaigns/{campaign_id}",
        campaign_routes.delete_campaign,
        "Delete a campaign that is not running",
        TAG_CAMPAIGNS,
        (Reply(204, "deleted"), E401, CAMPAIGN_404, CAMPAIGN_409),
        path_params=(CAMPAIGN_ID,),
    ),
    *(
        Route(
            "POST",
            f"/v3/update-campaigns/{{campaign_id}}/{verb}",
            handler,
            summary,
            TAG_CAMPAIGNS,
            (
                Reply(202 if verb != "archive" else 200, "the campaign", campaign_routes.CampaignModel),
                E401,
                CAMPAIGN_404,
                CAMPAIGN_409,
            ),
            path_params=(CAMPAIGN_ID,),
        )
        for verb, handler, summary in (
            ("start", campaign_routes.start_campaign, "Start a draft campaign"),
            ("stop", campaign_routes.stop_campaign, "Stop a running campaign (devices already updating finish)"),
            ("archive", campaign_routes.archive_campaign, "Archive a draft or stopped campaign"),
        )
    ),
    Route(
        "GET",
        "/v3/update-campaigns/{campaign_id}/campaign-device-metadata",
        campaign_routes.list_devices,
        "Each device's deployment state in the campaign",
        TAG_CAMPAIGNS,
        (Reply(200, "a page", campaign_routes.CampaignDeviceList), v3(400, "a bad parameter"), E401, CAMPAIGN_404),
        path_params=(CAMPAIGN_ID,),
        query=PAGE,
    ),
    Route(
        "GET",
        "/v3/update-campaigns/{campaign_id}/metrics",
        campaign_routes.metrics,
        "Device counts by outcome",
        TAG_CAMPAIGNS,
        (Reply(200, "the counts", campaign_routes.CampaignMetrics), E401, CAMPAIGN_404),
        path_params=(CAMPAIGN_ID,),
    ),
    Route(
        "GET",
        "/v3/update-campaigns/{campaign_id}/statistics",
        campaign_routes.statistics,
        "Device counts by summary status (success, fail, info, skipped)",
        TAG_CAMPAIGNS,
        (Reply(200, "the list", campaign_routes.StatisticsList), E401, CAMPAIGN_404),
        path_params=(CAMPAIGN_ID,),
    ),
)
